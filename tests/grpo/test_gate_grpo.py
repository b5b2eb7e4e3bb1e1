"""Gate-only GRPO (trace_train.grpo.gate_grpo) on the shipped tiny policy composed with two tiny adapters."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from peft import LoraConfig, get_peft_model

import trace_train.grpo.gate_grpo as gate_grpo
from trace_envs.config_builder import ConfigError
from trace_moe import ComposedModel, GateConfig, load_adapters
from trace_moe.config import GateGRPOConfig, MoEConfig
from trace_train.grpo.gate_grpo import train_gates_grpo
from trace_train.model.factory import load_policy
from trace_train.paths import REPO_ROOT
from trace_train.trajectory import read_trajectories

torch.set_num_threads(1)

SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"
ENV = "trace/precondition_verification-v0"
BACKEND = {"max_turns": 4}


def _make_adapter(out, seed: int):
    """A peft LoRA adapter on the shipped base with random non-zero A and B."""
    model, _ = load_policy(SHIPPED)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"]))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate_grpo_adapters")
    return [_make_adapter(root / name, seed) for name, seed in (("cap_a", 100), ("cap_b", 101))]


def _composed(adapters, top_k: int = 2):
    model, tok = load_policy(SHIPPED)
    gate = GateConfig(top_k=top_k, base_bias=1.0)
    return ComposedModel(model, load_adapters(adapters, ["cap_a", "cap_b"]), gate), tok


def _cfg(**kw) -> GateGRPOConfig:
    base = dict(iterations=2, groups_per_iter=2, group_size=4, lr=0.05, max_new_tokens=16, checkpoint_every=1,
                seed=2, format_penalty=1.0, threads=1, progress=False)  # seed 2: both iterations train
    return GateGRPOConfig(**{**base, **kw})


def _frozen_state(composed) -> dict[str, torch.Tensor]:
    """Every base/adapter tensor: all parameters and buffers outside the gates."""
    tensors = {f"param:{n}": p for n, p in composed.named_parameters() if not n.startswith("gates.")}
    tensors.update({f"buffer:{n}": b for n, b in composed.named_buffers() if not n.startswith("gates.")})
    return {k: v.detach().clone() for k, v in tensors.items()}


def _gates(composed) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in composed.gates.state_dict().items()}


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(adapters, tmp_path_factory):
    out = tmp_path_factory.mktemp("gate_grpo_run")
    composed, tok = _composed(adapters)
    frozen, initial = _frozen_state(composed), _gates(composed)
    result = train_gates_grpo(composed, tok, ENV, _cfg(), out, backend_kwargs=BACKEND)
    return {"out": out, "composed": composed, "frozen": frozen, "initial": initial, "gates": _gates(composed),
            "result": result}


def test_only_the_gates_change(uninterrupted):
    run, composed = uninterrupted, uninterrupted["composed"]
    after = _frozen_state(composed)
    assert after.keys() == run["frozen"].keys() and any(k.endswith("lora_b") for k in after)
    changed = [k for k in after if not torch.equal(after[k], run["frozen"][k])]
    assert changed == []  # base and adapters bit-identical
    moved = [k for k in run["gates"] if not torch.equal(run["gates"][k], run["initial"][k])]
    assert moved, "no gate parameter moved"
    history = run["result"]["history"]
    assert len(history) == 2 and sum(h["trained_samples"] for h in history) > 0
    assert any(h["grad_norm"] > 0 and h["gate_delta_norm"] > 0 for h in history)
    assert run["result"]["trainable_params"] == sum(p.numel() for p in composed.gate_parameters())
    assert [r["iteration"] for r in _rows(run["out"] / "metrics.jsonl")] == [0, 1]
    records = read_trajectories(run["out"] / "rollouts" / "iter_0000.jsonl")
    assert len(records) == 8 and all(r.token_ids and sum(r.loss_mask) > 0 for r in records)
    assert len({r.seed for r in records[:4]}) == 1  # a group shares its env seed


def test_the_final_composition_loads_with_the_trained_gates(uninterrupted):
    model, _ = load_policy(SHIPPED)
    loaded = ComposedModel.load(uninterrupted["result"]["composed_dir"], model=model)
    assert loaded.slot_names == ["base", "cap_a", "cap_b"]
    for key, value in uninterrupted["gates"].items():
        assert torch.equal(loaded.gates.state_dict()[key], value), key


def test_the_same_seed_gives_the_same_gates(uninterrupted, adapters, tmp_path):
    composed, tok = _composed(adapters)
    train_gates_grpo(composed, tok, ENV, _cfg(), tmp_path, backend_kwargs=BACKEND)
    for key, value in uninterrupted["gates"].items():
        assert torch.equal(composed.gates.state_dict()[key], value), key
    for name in ("iter_0000.jsonl", "iter_0001.jsonl"):
        ours = [r.token_ids for r in read_trajectories(tmp_path / "rollouts" / name)]
        theirs = [r.token_ids for r in read_trajectories(uninterrupted["out"] / "rollouts" / name)]
        assert ours == theirs


def test_a_resumed_run_equals_the_uninterrupted_one(uninterrupted, adapters, tmp_path, monkeypatch):
    real = gate_grpo.optimize

    def crash_in_iteration_1(*args, **kwargs):
        if args[5] == 1:  # the iteration argument
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(gate_grpo, "optimize", crash_in_iteration_1)
    composed, tok = _composed(adapters)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_gates_grpo(composed, tok, ENV, _cfg(), tmp_path, backend_kwargs=BACKEND)
    assert json.loads((tmp_path / "checkpoints" / "latest.json").read_text())["iteration"] == 1
    assert not (tmp_path / "composed").exists()
    monkeypatch.setattr(gate_grpo, "optimize", real)

    with pytest.raises(ValueError, match="already holds a training run"):  # no silent restart over it
        train_gates_grpo(_composed(adapters)[0], tok, ENV, _cfg(), tmp_path, backend_kwargs=BACKEND)
    fresh, tok = _composed(adapters)  # initial gates: the checkpoint must bring iteration 1's state back
    result = train_gates_grpo(fresh, tok, ENV, _cfg(), tmp_path, resume=True, backend_kwargs=BACKEND)
    assert result["start_iteration"] == 1 and len(result["history"]) == 1
    for key, value in uninterrupted["gates"].items():
        assert torch.equal(fresh.gates.state_dict()[key], value), key
    assert [r["iteration"] for r in _rows(tmp_path / "metrics.jsonl")] == [0, 1]
    assert [r["iteration"] for r in _rows(tmp_path / "seeds.jsonl")] == [0, 0, 1, 1]


def test_top1_gates_on_the_base_slot_get_no_gradient_and_say_so(adapters, tmp_path, caplog):
    composed, tok = _composed(adapters, top_k=1)  # base bias 1.0 > 0: every token routes to slot 0 alone
    initial = _gates(composed)
    with caplog.at_level(logging.WARNING, logger="trace_train.grpo.gate_grpo"):
        # seed 5: both groups mixed under this composition (with seed 2 since session 29's precondition env, none)
        result = train_gates_grpo(composed, tok, ENV, _cfg(iterations=1, seed=5), tmp_path, backend_kwargs=BACKEND)
    (row,) = result["history"]
    assert row["trained_samples"] > 0 and row["grad_norm"] == 0.0
    assert all(torch.equal(composed.gates.state_dict()[k], v) for k, v in initial.items())
    assert "no gradient reached the gates" in caplog.text


def test_the_moe_group_builds_gate_grpo_and_bad_keys_fail_with_their_path():
    cfg = MoEConfig.from_dict({"train": {"method": "grpo_mixture"}, "grpo": {"group_size": 4, "lr": 1e-3}})
    assert cfg.train.method == "grpo_mixture" and (cfg.grpo.group_size, cfg.grpo.lr) == (4, 1e-3)
    assert MoEConfig.from_dict(None).train.method == "supervised"
    with pytest.raises(ConfigError, match=r"^moe\.grpo\.group_sise: unknown key \(did you mean 'group_size'\?\)"):
        MoEConfig.from_dict({"grpo": {"group_sise": 4}})
    with pytest.raises(ConfigError, match=r"^moe\.grpo\.lr: expected float"):
        MoEConfig.from_dict({"grpo": {"lr": "fast"}})
    with pytest.raises(ConfigError, match=r"^moe\.grpo: group_size must be >= 2"):
        MoEConfig.from_dict({"grpo": {"group_size": 1}})
    with pytest.raises(ConfigError, match=r"^moe\.train\.method: expected one of \['supervised', 'routing_targets', 'grpo_target'"):
        MoEConfig.from_dict({"train": {"method": "rl"}})
    with pytest.raises(ConfigError, match=r"^moe\.grpo\.loss_level: expected one of"):
        MoEConfig.from_dict({"grpo": {"loss_level": "tokens"}})
