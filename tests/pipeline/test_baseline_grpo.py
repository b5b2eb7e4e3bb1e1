"""``pipeline.baseline_grpo``: one trained baseline trains with its own GRPO keys (the replication's SFT row with one
pass while every other row takes two), its stage and the evaluation rerun, and nothing else does."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from trace_train.paths import CONF_DIR
from trace_train.pipeline import run as pipeline_run
from trace_train.pipeline.config import PipelineConfigs
from trace_train.pipeline.run import Pipeline
from trace_train.pipeline.stage_runner import content_hash


def configs(*overrides: str) -> PipelineConfigs:
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return PipelineConfigs.from_hydra(compose("pipeline", overrides=list(overrides)))


def test_override_applies_to_its_row_only():
    c = configs("pipeline.baselines=[grpo_target,sft]", "++pipeline.baseline_grpo={sft:{ppo_epochs:1,lora:{r:4}}}")
    assert c.grpo.ppo_epochs == 2  # the quick preset's two passes
    sft = c.pipeline.baseline_grpo_cfg("sft", c.grpo)
    assert (sft.ppo_epochs, sft.lora.r) == (1, 4)
    assert sft.lora.alpha == c.grpo.lora.alpha  # a nested key overrides that key only
    assert (sft.lr, sft.mini_batches, sft.temperature) == (c.grpo.lr, c.grpo.mini_batches, c.grpo.temperature)
    assert c.pipeline.baseline_grpo_cfg("grpo_target", c.grpo) is c.grpo


@pytest.mark.parametrize(("override", "message"), [
    ("{sft:{ppo_epoch:1}}", "pipeline.baseline_grpo.sft.ppo_epoch: unknown key (did you mean 'ppo_epochs'?)"),
    ("{sft:{ppo_epochs:0}}", "pipeline.baseline_grpo.sft: invalid GRPO config:\n  - ppo_epochs must be >= 1, got 0"),
    ("{sft:{iterations:30}}", "pipeline.baseline_grpo.sft: ['iterations'] cannot differ per baseline"),
    ("{prompted:{lr:0.1}}", "pipeline.baseline_grpo.prompted: not a trained baseline"),
])
def test_bad_override_fails_with_its_path(override, message):
    with pytest.raises(ValueError) as info:  # when the configs are built, not when the row starts training
        configs("pipeline.baselines=[sft,prompted]", f"++pipeline.baseline_grpo={override}")
    assert message in str(info.value)


class FakeTraining:
    """Stands in for ``grpo_run`` (real GRPO is tested elsewhere): records what each row trained with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, cfg, grpo_cfg, model, env, name, out: Path, iterations: int, **_) -> dict:
        self.calls.append((name, grpo_cfg.ppo_epochs, iterations))
        versions = [{"iteration": i, "rollouts": i * 4, "dir": str(out / f"v{i}")} for i in range(1, iterations + 1)]
        return {"adapter_dir": str(out / "final"), "versions": versions, "rollouts": iterations * 4}


def _pipeline(tmp_path: Path, *overrides: str) -> Pipeline:
    c = configs("pipeline.compose.enabled=false", "grpo.iterations=2", "grpo.checkpoint_every=1", "pipeline.workers=1",
                f"pipeline.run_dir={tmp_path}", *overrides)
    return Pipeline.from_configs(c, Path("."))


def test_overridden_row_retrains_alone_and_enters_the_eval_hash(tmp_path, monkeypatch):
    fake = FakeTraining()
    monkeypatch.setattr(pipeline_run, "grpo_run", fake)
    envs = {"precondition_verification": "trace/precondition_verification-v0"}
    rows = "pipeline.baselines=[grpo_target,grpo_target_4x,sft]"

    plain = _pipeline(tmp_path, rows)
    plain.train_run("model", envs, "h")
    # the adapter, then the 4x run (the 1x row is its checkpoint), then SFT, all with two passes
    assert fake.calls == [("precondition_verification", 2, 2), ("grpo_target_4x", 2, 8), ("sft", 2, 2)]
    assert plain._baseline_overrides() == []  # runs without overrides keep their eval hash

    fake.calls.clear()
    one_pass = _pipeline(tmp_path, rows, "++pipeline.baseline_grpo={sft:{ppo_epochs:1}}")
    run = one_pass.train_run("model", envs, "h")
    assert fake.calls == [("sft", 1, 2)]  # only the overridden row reruns
    assert run.baselines["grpo_target"]["checkpoint_of"] == run.baselines["grpo_target_4x"]["adapter_dir"]
    parts = one_pass._baseline_overrides()
    assert parts == [{"baseline_grpo": {"sft": {"ppo_epochs": 1}}}]
    assert content_hash("h", *parts) != content_hash("h")

    # a 1x row trained unlike the 4x row is no longer the 4x run's checkpoint: it trains on its own (and SFT,
    # back without its override, trains as it first did)
    fake.calls.clear()
    own = _pipeline(tmp_path, rows, "++pipeline.baseline_grpo={grpo_target:{lr:0.002}}")
    run = own.train_run("model", envs, "h")
    assert fake.calls == [("grpo_target", 2, 2), ("sft", 2, 2)]
    assert "checkpoint_of" not in run.baselines["grpo_target"]
