"""The pipeline composes the stage groups: overrides reach the trainer and the gates; force maps to stages."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from trace_envs.config_builder import ConfigError
from trace_train.paths import CONF_DIR
from trace_train.pipeline.config import PipelineConfig, PipelineConfigs, check_force, is_forced
from trace_train.pipeline.stage_runner import StageRunner
from trace_train.pipeline.stages import trainer_config


def configs(*overrides: str) -> PipelineConfigs:
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return PipelineConfigs.from_hydra(compose("pipeline", overrides=list(overrides)))


def test_grpo_override_reaches_the_trainer_config():
    c = configs("grpo.group_size=4", "grpo.lr=0.002")
    trained = trainer_config(c.grpo, c.grpo.iterations)
    assert trained.group_size == 4 and trained.lr == 0.002
    assert configs().grpo.group_size == 8  # the quick preset's G when nothing is given
    # a trained baseline keeps every grpo value but its budget and mode
    sft = trainer_config(c.grpo, 3 * c.grpo.iterations, mode="sft")
    assert (sft.iterations, sft.mode, sft.group_size) == (3 * c.grpo.iterations, "sft", 4)


@pytest.mark.parametrize(("overrides", "expected"), [
    ((), (15, 8, 8, 5)),                                    # preset=quick (the default)
    (("preset=smoke",), (1, 2, 2, 1)),                      # the preset's values
    (("preset=paper",), (50, 8, 16, 5)),
    (("preset=smoke", "grpo.group_size=4", "grpo.iterations=3"), (3, 2, 4, 1)),  # command line beats preset
])
def test_preset_versus_command_line(overrides, expected):
    g = configs(*overrides).grpo
    assert (g.iterations, g.groups_per_iter, g.group_size, g.checkpoint_every) == expected


def test_training_samples_like_the_pipeline_policy_unless_grpo_says_otherwise():
    c = configs("pipeline.policy.temperature=0.7", "pipeline.policy.max_new_tokens=40")
    assert (c.grpo.temperature, c.grpo.max_new_tokens, c.grpo.threads) == (0.7, 40, 2)  # quick: 2 threads
    c = configs("pipeline.policy.temperature=0.7", "grpo.temperature=0.9")
    assert (c.pipeline.policy.temperature, c.grpo.temperature) == (0.7, 0.9)
    assert configs("preset=paper").grpo.max_new_tokens == 1024  # the paper preset's policy budget


def test_moe_group_is_the_pipelines_compose_config():
    quick = configs()
    assert (quick.moe.train.lr, quick.moe.train.epochs, quick.moe.gate.base_bias) == (5e-3, 10, 1.0)
    smoke = configs("preset=smoke")
    assert (smoke.moe.train.lr, smoke.moe.train.epochs, smoke.moe.gate.base_bias) == (5e-4, 1, 5.0)
    assert smoke.pipeline.compose.max_examples_per_capability == 4
    paper = configs("preset=paper", "moe.train.epochs=2", "moe.gate.top_k=2")
    assert (paper.moe.train.epochs, paper.moe.gate.top_k, paper.moe.gate.base_bias) == (2, 2, 5.0)


@pytest.mark.parametrize(("override", "message"), [
    ("grpo.lora.r=abc", "grpo.lora.r: expected int, got 'abc' (str)"),
    ("+grpo.group_sise=4", "grpo.group_sise: unknown key (did you mean 'group_size'?)"),
    ("moe.train.epochs=x", "moe.train.epochs: expected int, got 'x' (str)"),
    ("+pipeline.train.group_size=4", "pipeline.train.group_size: unknown key"),  # G lives in grpo now
    ("+pipeline.compose.lr=0.1", "pipeline.compose.lr: unknown key"),            # gate lr lives in moe.train
    ("analysis.rho=high", "analysis.rho: expected float, got 'high' (str)"),
    ("+analysis.llm.modle=m", "analysis.llm.modle: unknown key (did you mean 'model'?)"),
    ("synthesis.gate.reward_min=low", "synthesis.gate.reward_min: expected float, got 'low' (str)"),
    ("+synthesis.llm.validation.n_seed=3", "synthesis.llm.validation.n_seed: unknown key (did you mean 'n_seeds'?)"),
    ("bootstrap.knobs.precondition=yes", "bootstrap.knobs.precondition: expected float, got 'yes' (str)"),
    ("pipeline.force=[trian]", "pipeline.force: unknown stage 'trian'"),
    # values that used to pass and fail deep inside a run (NaN passes every "x <= 0" check)
    ("grpo.lr=nan", "grpo.lr: expected a finite number, got nan"),
    ("moe.train.lr=inf", "moe.train.lr: expected a finite number, got inf"),
    ("grpo.top_p=0", "top_p must be in (0, 1], got 0.0"),
    ("grpo.weight_decay=-1", "weight_decay must be >= 0, got -1.0"),
    ("grpo.lora.dropout=1.5", "lora needs dropout in [0, 1), alpha > 0 and target modules"),
    ("pipeline.eval.split=bogus", "pipeline.eval.split: unknown split 'bogus'"),
    ("pipeline.rollouts.offset=999999", "seeds from 999999 do not fit the 'train' split"),
    ("pipeline.policy.temperature=0", "temperature must be > 0, got 0.0"),  # grpo.temperature follows it
    ("+synthesis.policy.knobs.precondtion=0.9", "unknown expert knob(s) ['precondtion']"),
    ("synthesis.gate.reward_min=0.9", "synthesis.gate.reward_min (0.9) > synthesis.gate.reward_max (0.6)"),
])
def test_bad_keys_fail_with_their_path(override, message):
    with pytest.raises(ValueError) as info:
        configs(override)
    assert message in str(info.value)


def test_force_names():
    check_force(["train", "baselines", "train/precondition_verification", "baselines/sft", "report"])
    with pytest.raises(ValueError) as info:
        check_force(["baselines/prompted"])  # prompted is not trained: it has no stage
    valid = "bootstrap, rollouts, analysis, synthesis, train, compose, baselines, eval, routing, replication, report"
    assert valid in str(info.value)
    assert "train/<capability>" in str(info.value) and "baselines/grpo_target" in str(info.value)
    assert "replication/<row>" in str(info.value)
    # another run seed's stages are forced with their group; the replication rows with theirs
    check_force(["baselines/grpo_target@s1", "replication", "replication/eval/top-2@s1"])
    assert is_forced("train/precondition_verification@s1", {"train"})
    assert is_forced("replication/eval/top-2@s1", {"replication"}) and not is_forced("eval", {"replication"})
    assert is_forced("train/precondition_verification", {"train"})
    assert is_forced("baselines/sft", {"baselines"}) and is_forced("baselines/sft", {"baselines/sft"})
    assert not is_forced("baselines/mixture", {"baselines/sft"})
    assert not is_forced("compose", {"train"}) and not is_forced("eval", {"train/eval"})
    assert is_forced("eval", {"eval"}) and not is_forced("train", set())
    with pytest.raises(ConfigError):
        PipelineConfig.from_dict({"force": "train"})  # a list, not a string


def test_force_train_reruns_every_adapter_stage(tmp_path):
    calls: list[str] = []

    def stage(name: str):
        def fn(out):
            calls.append(name)
            (out / "made").write_text(name)
            return {"name": name}
        return fn

    names = ("rollouts", "train/a", "train/b", "baselines/sft", "eval")

    def run_all(force: set[str]) -> None:
        runner = StageRunner(tmp_path, force=force)
        for name in names:
            runner.run(name, "h", stage(name))

    run_all(set())
    assert calls == list(names)
    calls.clear()
    run_all(set())
    assert calls == []  # unchanged: all skipped
    run_all({"train"})
    assert calls == ["train/a", "train/b"]
    calls.clear()
    run_all({"baselines", "train/b"})
    assert calls == ["train/b", "baselines/sft"]


def test_quick_preset_runs_two_workers_and_wide_evaluation_batches():
    """The main job fits its 30 minutes on a slow 2-core box only with both (session 44: 40.8 -> 23.7 minutes, every
    held-out rate the same); the smoke preset keeps one worker."""
    quick = configs()
    assert (quick.pipeline.workers, quick.pipeline.eval.batch_episodes) == (2, 128)
    assert configs("preset=smoke").pipeline.workers == 1
