"""Gate-only GRPO's resume is checked as the trainer's is: its settings, the adapters under the gates, the env
kwargs and the rollout options must be those config.json records, before the checkpoint loads."""

from __future__ import annotations

import json

import pytest
import torch
from test_gate_grpo import ENV, _composed, _make_adapter

from trace_moe.config import GateGRPOConfig
from trace_train.grpo.gate_grpo import train_gates_grpo

torch.set_num_threads(1)


def _cfg(**kw) -> GateGRPOConfig:
    base = dict(iterations=1, groups_per_iter=1, group_size=2, lr=0.05, max_new_tokens=8, checkpoint_every=1,
                seed=2, threads=1, progress=False)
    return GateGRPOConfig(**{**base, **kw})


def test_a_gate_grpo_resume_with_other_settings_or_adapters_is_refused(tmp_path):
    adapters = [_make_adapter(tmp_path / name, seed) for name, seed in (("cap_a", 100), ("cap_b", 101))]
    out = tmp_path / "run"
    composed, tok = _composed(adapters)
    train_gates_grpo(composed, tok, ENV, _cfg(), out, backend_kwargs={"max_turns": 2})
    saved = json.loads((out / "config.json").read_text())
    assert set(saved["adapters"]) == {"cap_a", "cap_b"} and saved["rollout"]["max_turns"] == 2

    for changed in (dict(lr=5.0), dict(seed=9), dict(group_size=4)):
        with pytest.raises(ValueError, match=f"trained with other settings \\({next(iter(changed))}: "):
            train_gates_grpo(_composed(adapters)[0], tok, ENV, _cfg(iterations=2, **changed), out, resume=True,
                             backend_kwargs={"max_turns": 2})
    with pytest.raises(ValueError, match="rollout: "):
        train_gates_grpo(_composed(adapters)[0], tok, ENV, _cfg(iterations=2), out, resume=True,
                         backend_kwargs={"max_turns": 3})
    other = _make_adapter(tmp_path / "other_b", 7)  # same name and shapes, other weights
    with pytest.raises(ValueError, match="adapters: "):
        train_gates_grpo(_composed([adapters[0], other])[0], tok, ENV, _cfg(iterations=2), out, resume=True,
                         backend_kwargs={"max_turns": 2})
    assert json.loads((out / "config.json").read_text()) == saved  # a refused resume rewrites nothing
    result = train_gates_grpo(_composed(adapters)[0], tok, ENV, _cfg(iterations=2), out, resume=True,
                              backend_kwargs={"max_turns": 2})
    assert result["start_iteration"] == 1
