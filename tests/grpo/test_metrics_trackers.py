"""Per-iteration metrics reach the log and the requested trackers (fake wandb / trackio modules)."""

from __future__ import annotations

import json
import logging
import sys
import types

import pytest
import torch
from test_trainer import make_trainer, small_config

from trace_train.grpo import GRPOConfig
from trace_train.grpo.metrics import MetricsLogger, check_trackers, format_line

torch.set_num_threads(1)


def _fake_tracker(name: str, calls: list) -> types.ModuleType:
    module = types.ModuleType(name)

    class Run:
        def log(self, data, step=None):
            calls.append(("log", name, step, dict(data)))

        def finish(self):
            calls.append(("finish", name))

    def init(**kw):
        calls.append(("init", name, kw))
        return Run()

    module.init = init
    if name == "trackio":  # trackio's API is module-level
        module.log = Run().log
        module.finish = Run().finish
    return module


def test_metrics_logger_logs_a_line_and_feeds_trackers(tmp_path, monkeypatch, caplog):
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_tracker("wandb", calls))
    monkeypatch.setitem(sys.modules, "trackio", _fake_tracker("trackio", calls))
    logger = MetricsLogger(tmp_path, tensorboard=False, trackers=["wandb", "trackio"], project="p", run_name="cap",
                           config={"lr": 1.0})
    with caplog.at_level(logging.INFO, logger="trace_train.grpo.metrics"):
        logger.log(2, {"reward_mean": 0.5, "success_rate": 0.25, "env_groups": {"a": 2}, "flag": True})
    logger.close()
    assert "iter 2: reward_mean=0.5 success_rate=0.25" in caplog.text
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["env_groups"] == {"a": 2}
    assert calls[0] == ("init", "wandb", {"project": "p", "name": "cap", "config": {"lr": 1.0}, "dir": str(tmp_path)})
    assert calls[1] == ("init", "trackio", {"project": "p", "name": "cap", "config": {"lr": 1.0}})
    logs = [c for c in calls if c[0] == "log"]
    assert logs == [("log", n, 2, {"train/reward_mean": 0.5, "train/success_rate": 0.25}) for n in ("wandb", "trackio")]
    assert [c for c in calls if c[0] == "finish"] == [("finish", "wandb"), ("finish", "trackio")]


def test_trackers_fail_clearly(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # "not installed": import raises ImportError
    with pytest.raises(ValueError, match="wandb was asked for but is not installed"):
        check_trackers(["wandb"])
    with pytest.raises(ValueError, match="unknown tracker 'mlflow'"):
        check_trackers(["mlflow"])
    cfg = GRPOConfig.from_mapping({"trackers": "wandb"})
    assert cfg.trackers == ["wandb"]
    with pytest.raises(ValueError, match="not installed"):
        cfg.validate()
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        GRPOConfig(max_new_tokens=0).validate()


def test_trainer_logs_every_iteration(tmp_path, monkeypatch, caplog):
    calls: list = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_tracker("wandb", calls))
    trainer, _ = make_trainer(tmp_path, small_config(iterations=2, trackers=["wandb"]))
    with caplog.at_level(logging.INFO, logger="trace_train.grpo.metrics"):
        trainer.train()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("iter ")]
    assert [line.split(":")[0] for line in lines] == ["iter 0", "iter 1"]
    assert [c[2] for c in calls if c[0] == "log"] == [0, 1]
    assert calls[0][2]["name"] == "cap" and calls[0][2]["config"]["trackers"] == ["wandb"]
    assert format_line(1, {"b": 2, "reward_mean": 1}) == "iter 1: reward_mean=1 b=2"
