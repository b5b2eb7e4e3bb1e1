"""GRPO on the target at TRACE's budget is the 4x run's checkpoint at that budget: with a constant learning rate and
seeds drawn from (run seed, iteration) alone, a run stopped after N iterations and the N-th checkpoint of a longer
run are the same adapter, bit for bit. The pipeline relies on it to train the 1x row once inside the 4x row."""

from dataclasses import replace

import pytest
from safetensors.torch import load_file

from trace_train.grpo import GRPOConfig
from trace_train.paths import shipped_checkpoint
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.stages import checkpoint_of, grpo_run

ENV = "trace/precondition_verification-v0"


def _weights(adapter_dir: str) -> dict:
    return load_file(f"{adapter_dir}/adapter_model.safetensors")


def test_short_run_equals_the_long_runs_checkpoint(tmp_path):
    base = str(shipped_checkpoint("retail-sim-tiny"))
    cfg = PipelineConfig.from_dict({"policy": {"max_new_tokens": 24}})
    grpo = replace(GRPOConfig(), iterations=1, groups_per_iter=2, group_size=2, checkpoint_every=1, lr=5e-3,
                   max_new_tokens=24, progress=False, tensorboard=False, format_penalty=1.0)
    short = grpo_run(cfg, grpo, base, ENV, "grpo_target", tmp_path / "short", iterations=2)
    long = grpo_run(cfg, grpo, base, ENV, "grpo_target_4x", tmp_path / "long", iterations=4)
    derived = checkpoint_of(long, 2)
    assert derived["rollouts"] == short["rollouts"] == 8
    assert [v["iteration"] for v in derived["versions"]] == [1, 2]
    a, b = _weights(short["adapter_dir"]), _weights(derived["adapter_dir"])
    assert a.keys() == b.keys()
    assert all((a[k] == b[k]).all() for k in a), "the 2-iteration run differs from the 4-iteration run's 2nd checkpoint"
    # and training moved the adapter (the comparison is not between two untouched initialisations)
    first = _weights(long["versions"][0]["dir"])
    assert any((first[k] != b[k]).any() for k in b)
    assert any((b[k] != _weights(long["adapter_dir"])[k]).any() for k in b)
    with pytest.raises(ValueError, match="no checkpoint at iteration 3"):
        checkpoint_of({**long, "versions": [v for v in long["versions"] if v["iteration"] != 3]}, 3)
