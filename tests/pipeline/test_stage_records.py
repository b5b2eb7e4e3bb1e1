"""StageRunner's records and folders: a deletion cut short is finished by the next run, and a folder no record
vouches for is never resumed; plus the pipeline hashes that decide what reruns (logging settings, the shipped
base) and the plan check that runs before any training job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

import trace_train.bootstrap.trainer as bootstrap_trainer
import trace_train.pipeline.run as pipeline_run
import trace_train.pipeline.stage_runner as stage_runner
from trace_envs.synthesis import SynthesisConfig
from trace_train.analysis.config import AnalysisConfig
from trace_train.bootstrap.compare import made_from
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.grpo import GRPOConfig
from trace_train.paths import CONF_DIR, shipped_checkpoint
from trace_train.pipeline.config import MoEConfig, PipelineConfig
from trace_train.pipeline.stage_runner import StageRunner, read_state

SET_ASIDE = "set_aside"


def _train(stage_dir: Path) -> dict:
    resumed = (stage_dir / "checkpoint").exists()  # what grpo_run and Bootstrapper do: resume from the folder
    (stage_dir / "checkpoint").write_text("trained")
    (stage_dir / "adapter").write_text("weights")
    return {"adapter": str(stage_dir / "adapter"), "resumed": resumed}


def test_a_deletion_cut_short_is_finished_whatever_config_comes_back(tmp_path, monkeypatch):
    StageRunner(tmp_path).run("train/cap", "hashA", _train)
    real_rmtree = shutil.rmtree

    def interrupted(path, *args, **kwargs):
        (Path(path) / "adapter").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(stage_runner.shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        StageRunner(tmp_path).run("train/cap", "hashB", _train)
    monkeypatch.setattr(stage_runner.shutil, "rmtree", real_rmtree)
    record = read_state(tmp_path / "pipeline.json")["stages"]["train/cap"]
    assert record["status"] == "clearing" and record["hash"] == "hashB"
    for inputs in ("hashA", "hashB"):  # back to the old config, or on with the new one: the stage is redone
        out = StageRunner(tmp_path).run("train/cap", inputs, _train)
        assert out["resumed"] is False and Path(out["adapter"]).exists()


def test_a_stage_without_a_record_sets_its_folder_aside_instead_of_resuming_it(tmp_path, caplog):
    StageRunner(tmp_path).run("train/cap", "h1", _train)
    (tmp_path / "pipeline.json").write_text("{damaged")
    with pytest.raises(ValueError, match=f"moved to {SET_ASIDE}/"):
        read_state(tmp_path / "pipeline.json")
    (tmp_path / "pipeline.json").rename(tmp_path / "pipeline.json.aside")
    out = StageRunner(tmp_path).run("train/cap", "h2", _train)
    assert out["resumed"] is False
    assert (tmp_path / SET_ASIDE / "train__cap.1" / "checkpoint").read_text() == "trained"
    assert "moved them to" in caplog.text
    (tmp_path / "pipeline.json").unlink()
    StageRunner(tmp_path).run("train/cap", "h3", _train)
    assert (tmp_path / SET_ASIDE / "train__cap.2" / "checkpoint").exists()  # nothing is overwritten
    assert StageRunner(tmp_path).run("train/cap", "h3", _train)["resumed"] is False  # recorded: skipped as before


def _pipeline(run_dir: Path, monkeypatch, grpo: GRPOConfig, bootstrap_cfg=None, **pipeline_kw) -> tuple[dict, list]:
    trained: list[tuple[str, int]] = []

    def fake_grpo_run(cfg, gcfg, model, env, adapter, out, iterations, mode="grpo", env_kwargs=None):
        trained.append((adapter, iterations))
        (out / "checkpoint").write_text(model)
        versions = [{"iteration": iterations, "rollouts": 8 * iterations, "dir": str(out / "v")}]
        return {"adapter": adapter, "adapter_dir": str(out / "v"), "versions": versions, "rollouts": 8}

    monkeypatch.setattr(pipeline_run, "grpo_run", fake_grpo_run)
    cfg = PipelineConfig(run_dir=str(run_dir), **pipeline_kw)
    cfg.report.routing_sample = 0
    cfg.compose.enabled = False
    p = pipeline_run.Pipeline(cfg, bootstrap_cfg or BootstrapConfig(), AnalysisConfig(), SynthesisConfig(), grpo,
                              Path("."), moe_cfg=MoEConfig())
    p._rollouts = lambda model, out: {}
    p._analysis = lambda out: {"selected": ["precondition_verification"]}
    p._synthesis = lambda caps, model, out: {"envs": {"precondition_verification": "env"}}
    p._register_emitted = lambda: None
    p._eval = lambda *args: {"evaluated": True}
    p._report = lambda out: {}
    p.run()
    return json.loads((run_dir / "pipeline.json").read_text())["stages"], trained


def test_a_logging_setting_retrains_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline_run, "resolve_base_model", lambda *args: {"model": "tiny", "source": "given"})
    grpo = GRPOConfig(iterations=2)
    _pipeline(tmp_path, monkeypatch, grpo)
    for changed in (dict(progress=False), dict(tensorboard=False), dict(tracker_project="other")):
        stages, trained = _pipeline(tmp_path, monkeypatch, GRPOConfig(iterations=2, **changed))
        assert trained == [] and {s["last_action"] for s in stages.values()} == {"skipped"}, changed
    _, trained = _pipeline(tmp_path, monkeypatch, GRPOConfig(iterations=2, lr=3e-5))
    assert trained  # a training setting still retrains


def test_the_shipped_checkpoint_setting_is_in_the_bootstrap_hash(tmp_path, monkeypatch):
    class FakeBootstrapper:  # stands in for a (long) fresh bootstrap
        def __init__(self, cfg, stage_dir):
            self.model_dir = Path(stage_dir) / "model"

        def run(self):
            self.model_dir.mkdir(parents=True, exist_ok=True)
            return {}

    monkeypatch.setattr(bootstrap_trainer, "Bootstrapper", FakeBootstrapper)
    shipped = shipped_checkpoint("retail-sim-tiny")
    bootstrap_cfg = BootstrapConfig.from_dict(OmegaConf.load(CONF_DIR / "bootstrap" / "default.yaml"))
    assert made_from(shipped) == bootstrap_cfg.content_hash()
    other = tmp_path / "other-base"  # a remade base with the same config hash but other weights
    shutil.copytree(shipped, other)
    weights = load_file(other / "model.safetensors")
    save_file({k: v + 0.01 * torch.ones_like(v) for k, v in weights.items()}, other / "model.safetensors",
              metadata={"format": "pt"})

    def base(shipped_ckpt):
        stages, _ = _pipeline(tmp_path / "run", monkeypatch, GRPOConfig(iterations=2), bootstrap_cfg,
                              shipped_checkpoint=shipped_ckpt)
        return stages["bootstrap"]["last_action"], stages["bootstrap"]["outputs"]["model"]

    assert base("retail-sim-tiny") == ("ran", str(shipped))
    assert base(str(other)) == ("ran", str(other))
    assert base(None) == ("ran", str((tmp_path / "run" / "bootstrap" / "model").resolve()))
    assert base(None)[0] == "skipped"
    assert base("retail-sim-tiny") == ("ran", str(shipped))


def test_checkpoint_every_must_divide_the_budget_before_the_4x_run_trains(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline_run, "resolve_base_model", lambda *args: {"model": "tiny", "source": "given"})
    with pytest.raises(ValueError, match="grpo.checkpoint_every=4 does not divide it"):
        _pipeline(tmp_path, monkeypatch, GRPOConfig(iterations=10, checkpoint_every=4),
                  baselines=["grpo_target", "grpo_target_4x"])
    stages = read_state(tmp_path / "pipeline.json")["stages"]
    assert not [name for name in stages if name.startswith(("train/", "baselines/"))]
