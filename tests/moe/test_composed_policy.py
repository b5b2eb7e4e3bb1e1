"""A saved composition plays like any policy through ``trace_train.policies`` (kind ``composed``)."""

from __future__ import annotations

import torch

from trace_moe import ComposedModel
from trace_train.policies import PolicySpec, build_backend
from trace_train.rollout.base import EpisodeRequest

from .moe_helpers import make_adapters


def _play(spec: PolicySpec):
    backend, adapter = build_backend(spec)
    requests = [EpisodeRequest("trace/retail-sim-v0", seed=1_000_000 + i, sample_seed=i) for i in range(2)]
    return backend.rollout(requests, spec.sampling, adapter)


def test_composed_policy_rolls_out_and_starts_as_the_base(tmp_path):
    import trace_envs  # noqa: F401
    from trace_train.bootstrap.config import BootstrapConfig
    from trace_train.bootstrap.data import train_tokenizer
    from trace_train.model import build_model, save_policy

    tokenizer = train_tokenizer(BootstrapConfig(tokenizer_episodes=40))
    base = save_policy(build_model("tiny", tokenizer, seed=0), tokenizer, tmp_path / "base")
    adapters = make_adapters(tmp_path, base, n=2)
    composed = ComposedModel.from_pretrained(base, adapters, adapter_names=["cap_a", "cap_b"])
    composed.save(tmp_path / "composed")
    common = dict(model=str(base), max_new_tokens=12, temperature=1.0)
    base_records = _play(PolicySpec.from_dict({"kind": "hf", "name": "base", **common}))
    mixed = _play(PolicySpec.from_dict({"kind": "composed", "name": "moe", "adapter": str(tmp_path / "composed"),
                                        **common}))
    assert [r.token_ids for r in mixed] == [r.token_ids for r in base_records]  # base-slot bias routes to slot 0
    assert mixed[0].policy == "moe" and sum(mixed[0].loss_mask) > 0

    # Gates that prefer adapter 1 change what the policy samples.
    with torch.no_grad():
        for gate in composed.gates:
            linear = next(m for m in gate.modules() if isinstance(m, torch.nn.Linear))
            linear.bias.zero_()
            linear.bias[1] = 10.0
    composed.save(tmp_path / "composed_a")
    routed = _play(PolicySpec.from_dict({"kind": "composed", "name": "moe", "adapter": str(tmp_path / "composed_a"),
                                         **common}))
    assert [r.token_ids for r in routed] != [r.token_ids for r in base_records]
