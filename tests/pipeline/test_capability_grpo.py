"""``pipeline.capability_grpo``: one capability's adapter trains with its own GRPO keys (e.g. LoRA on one layer's
attention), the other adapters and the trained baselines with the grpo group's; the override enters the stage hashes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from trace_train.paths import CONF_DIR
from trace_train.pipeline import run as pipeline_run
from trace_train.pipeline.config import PipelineConfigs
from trace_train.pipeline.run import Pipeline
from trace_train.pipeline.stage_runner import content_hash

LAYER1 = "[layers.1.self_attn.q_proj,layers.1.self_attn.v_proj]"
ENVS = {"precondition_verification": "trace/precondition_verification-v0",
        "multi_step_completion": "trace/multi_step_completion-v0"}


def configs(*overrides: str) -> PipelineConfigs:
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return PipelineConfigs.from_hydra(compose("pipeline", overrides=list(overrides)))


def test_override_applies_to_its_capability_only():
    c = configs(f"++pipeline.capability_grpo={{precondition_verification:{{lr:0.001,lora:{{target_modules:{LAYER1}}}}}}}")
    pre = c.pipeline.capability_grpo_cfg("precondition_verification", c.grpo)
    assert pre.lr == 0.001 and pre.lora.target_modules == ["layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj"]
    assert (pre.lora.r, pre.lora.alpha) == (c.grpo.lora.r, c.grpo.lora.alpha)  # a nested key overrides that key only
    assert (pre.ppo_epochs, pre.hint_fraction, pre.iterations) == (c.grpo.ppo_epochs, c.grpo.hint_fraction,
                                                                    c.grpo.iterations)
    assert c.pipeline.capability_grpo_cfg("multi_step_completion", c.grpo) is c.grpo
    assert c.pipeline.grpo_overrides() == [{"capability_grpo": c.pipeline.capability_grpo}]
    assert configs().pipeline.grpo_overrides() == []  # runs without overrides keep their hashes


@pytest.mark.parametrize(("override", "message"), [
    ("{precondition_verification:{lora:{rank:4}}}",
     "pipeline.capability_grpo.precondition_verification.lora.rank: unknown key"),
    ("{precondition_verification:{lr:-1}}", "pipeline.capability_grpo.precondition_verification: invalid GRPO config"),
    ("{precondition_verification:{group_size:4}}",
     "pipeline.capability_grpo.precondition_verification: ['group_size'] cannot differ per capability"),
])
def test_bad_override_fails_with_its_path(override, message):
    with pytest.raises(ValueError) as info:  # when the configs are built, not when that adapter starts training
        configs(f"++pipeline.capability_grpo={override}")
    assert message in str(info.value)


def test_a_rank_the_composer_cannot_take_fails_before_training():
    """The composer needs every adapter at one rank: another rank for one capability would train every adapter
    and then fail at the compose stage, so it fails when the configs are built (it is fine without composition)."""
    with pytest.raises(ValueError, match=r"capability_grpo.precondition_verification: lora.r=8 differs from "
                                         r"grpo.lora.r=16.*pipeline.compose.enabled=false"):
        configs("++pipeline.capability_grpo={precondition_verification:{lora:{r:8}}}")
    alone = configs("pipeline.compose.enabled=false",
                    "++pipeline.capability_grpo={precondition_verification:{lora:{r:8}}}")
    assert alone.pipeline.capability_grpo_cfg("precondition_verification", alone.grpo).lora.r == 8
    assert configs("++pipeline.capability_grpo={precondition_verification:{lora:{r:16}}}")  # the group's own rank


class FakeTraining:
    """Stands in for ``grpo_run`` (real GRPO and composition over mixed modules are tested elsewhere)."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[float, tuple[str, ...]]] = {}

    def __call__(self, cfg, grpo_cfg, model, env, name, out: Path, iterations: int, **_) -> dict:
        self.calls[name] = (grpo_cfg.lr, tuple(grpo_cfg.lora.target_modules))
        versions = [{"iteration": i, "rollouts": i * 4, "dir": str(out / f"v{i}")} for i in range(1, iterations + 1)]
        return {"adapter_dir": str(out / "final"), "versions": versions, "rollouts": iterations * 4}


def test_each_adapter_trains_with_its_own_config(tmp_path, monkeypatch, caplog):
    fake = FakeTraining()
    monkeypatch.setattr(pipeline_run, "grpo_run", fake)
    c = configs("pipeline.compose.enabled=false", "grpo.iterations=2", "grpo.checkpoint_every=1",
                "pipeline.workers=1", f"pipeline.run_dir={tmp_path}", "pipeline.baselines=[mixture]",
                f"++pipeline.capability_grpo={{precondition_verification:{{lr:0.001,lora:{{target_modules:{LAYER1}}}}},"
                "tool_calling_precision:{lr:0.002}}")
    Pipeline.from_configs(c, Path(".")).train_run("model", ENVS, content_hash("h", *c.pipeline.grpo_overrides()))
    full = tuple(c.grpo.lora.target_modules)
    assert fake.calls == {
        "precondition_verification": (0.001, ("layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj")),
        "multi_step_completion": (c.grpo.lr, full),
        "mixture": (c.grpo.lr, full),  # a baseline keeps the grpo group's config
    }
    # an override for a capability the run does not train is said, not dropped silently
    assert "no adapter is trained for ['tool_calling_precision']" in caplog.text
