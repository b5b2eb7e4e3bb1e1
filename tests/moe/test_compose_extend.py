"""Gate labels from the rollout record, `compose` defaults that route, and extending a saved composition."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file

from tests.cli_runner import run_cli
from trace_moe import ComposedModel, GateConfig, GateTrainConfig, read_examples, train_gates
from trace_moe.examples import capability_from_env_id, example_from_record
from trace_train.trajectory import write_jsonl_atomic

from .test_gate_training import synthetic_examples

SLOTS = ["base", "cap0", "cap1", "cap2"]


def _rollout_rows(examples, slots=SLOTS):
    """GRPO-rollout-like records: the capability is only in the env id (no info.capability)."""
    return [{"env_id": f"trace/{slots[e.label]}-v0" if e.label else "trace/retail-sim-v0", "seed": i,
             "success": True, "token_ids": e.input_ids, "loss_mask": e.loss_mask, "episode_id": e.episode_id,
             "info": {"steps": 3}} for i, e in enumerate(examples)]


def test_capability_from_env_id():
    assert capability_from_env_id("trace/cap1-v0", SLOTS) == "cap1"
    assert capability_from_env_id("mymod:trace/cap2-v3", SLOTS) == "cap2"
    assert capability_from_env_id("trace/cap0-retail-sim-v0", SLOTS) == "cap0"  # pipeline-synthesized id
    assert capability_from_env_id("trace/retail-sim-v0", SLOTS) is None  # the target names no adapter
    assert capability_from_env_id("trace/base-v0", SLOTS) is None  # slot 0 is never derived
    assert capability_from_env_id("trace/a_b-x-v0", ["base", "a", "a_b"]) == "a_b"


def test_rollout_labels_come_from_the_env_id(tmp_path):
    rows = _rollout_rows([e for e in synthetic_examples(2, seed=1) if e.label])
    rows.append({**rows[0], "env_id": "trace/retail-sim-v0"})
    path = write_jsonl_atomic(tmp_path / "rollouts.jsonl", rows)
    with pytest.raises(ValueError, match=r"rollouts.jsonl:7: cannot derive a capability label.*retail-sim"):
        read_examples(path, SLOTS)
    examples = read_examples(path, SLOTS, env_labels={"trace/retail-sim-v0": "base"})
    assert [e.label for e in examples] == [1, 1, 2, 2, 3, 3, 0]
    # an explicit info label wins over the env id; a GateExample-like row without any label is refused
    assert example_from_record({**rows[0], "info": {"capability": "cap2"}}, SLOTS).label == 3
    with pytest.raises(ValueError, match="cannot derive"):
        example_from_record({"input_ids": [1, 2], "loss_mask": [0, 1]}, SLOTS)


def test_compose_defaults_route_like_the_pipeline(tiny, tmp_path, capsys):
    """No moe.* overrides: the standalone defaults must move tokens off the base slot."""
    base_path, adapter_paths = tiny
    data = write_jsonl_atomic(tmp_path / "data.jsonl", _rollout_rows(synthetic_examples(8, seed=4)))
    out = tmp_path / "composed"
    code, stdout, stderr = run_cli("compose", f"base={base_path}", f"adapters=[{','.join(map(str, adapter_paths))}]",
                                   f"data={data}", f"out={out}", "held_out_frac=0.25",
                                   "env_labels={trace/retail-sim-v0: base}", hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, stderr
    metrics = json.loads((out / "compose_metrics.json").read_text())
    assert metrics["train_counts"] == {"base": 6, "cap0": 6, "cap1": 6, "cap2": 6}
    routing = metrics["routing"]
    assert not routing["collapsed"]
    assert routing["load"][0] < 0.6
    assert routing["token_accuracy"] > 0.5


def _save_two_slot_composition(base_path, adapter_paths, out):
    composed = ComposedModel.from_pretrained(base_path, adapter_paths[:2], GateConfig(base_bias=1.0))
    examples = [e for e in synthetic_examples(6, seed=2) if e.label < 3]
    train_gates(composed, examples, GateTrainConfig(lr=0.03, epochs=4, batch_size=8, grad_accum=1, label_coef=1.0))
    composed.save(out)
    return load_file(str(out / "gates.safetensors"))


@pytest.mark.parametrize("mode", ["new_slot", "all"])
def test_extend_adds_one_slot(tiny, tmp_path, capsys, mode):
    base_path, adapter_paths = tiny
    saved = _save_two_slot_composition(base_path, adapter_paths, tmp_path / "old")
    adapter_hash = (adapter_paths[0] / "adapter_model.safetensors").read_bytes()
    data = write_jsonl_atomic(tmp_path / "data.jsonl", _rollout_rows(synthetic_examples(8, seed=5)))
    out = tmp_path / "new"
    code, _, stderr = run_cli("compose", f"extend={tmp_path / 'old'}", f"adapters=[{adapter_paths[2]}]",
                              f"data={data}", f"out={out}", "held_out_frac=0.25", f"extend_train={mode}",
                              "env_labels={trace/retail-sim-v0: base}", "moe.train.lr=0.03", "moe.train.epochs=6",
                              "moe.train.batch_size=8", "moe.train.grad_accum=1", "moe.train.label_coef=1.0",
                              hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, stderr
    loaded = ComposedModel.load(out)
    assert loaded.slot_names == SLOTS
    assert (adapter_paths[0] / "adapter_model.safetensors").read_bytes() == adapter_hash  # adapters untouched
    assert (tmp_path / "old" / "gates.safetensors").exists()
    for i, gate in enumerate(loaded.gates):
        old_w = saved[f"{i}.proj.weight"]
        same = torch.equal(gate.proj.weight[:3], old_w) and torch.equal(gate.proj.bias[:3], saved[f"{i}.proj.bias"])
        assert same == (mode == "new_slot")
        assert gate.proj.weight[3].abs().sum() > 0  # the new slot's row trained
    metrics = json.loads((out / "compose_metrics.json").read_text())
    before, after = metrics["routing_before"], metrics["routing"]
    assert before["slot_tokens"] == after["slot_tokens"]  # the same held-out examples
    assert before["load"][3] == 0.0 and before["slot_accuracy"][3] == 0.0
    assert after["slot_accuracy"][3] > 0.5
    assert metrics["extend_train"] == mode


def test_extend_refuses_a_second_adapter_and_bad_input_leaves_no_run_dir(tiny, tmp_path, capsys, caplog,
                                                                         monkeypatch):
    base_path, adapter_paths = tiny
    monkeypatch.chdir(tmp_path)  # outputs/ is relative to the working directory, as for a user
    _save_two_slot_composition(base_path, adapter_paths, tmp_path / "old")
    data = write_jsonl_atomic(tmp_path / "data.jsonl", _rollout_rows(synthetic_examples(1, seed=5)))
    hydra_dir = "outputs/compose/now"
    cases = [
        ([f"extend={tmp_path / 'old'}", f"adapters=[{adapter_paths[1]},{adapter_paths[2]}]"], "exactly one adapter"),
        ([f"extend={tmp_path / 'old'}", f"adapters=[{adapter_paths[0]}]"], "already has a slot named 'cap0'"),
        ([f"base={base_path}", f"adapters=[{tmp_path / 'nope'}]"], "no such peft adapter directory"),
        ([f"base={base_path}", f"adapters=[{adapter_paths[0]}]", "held_out_frac=1.5"], "held_out_frac"),
        ([f"base={base_path}", f"adapters=[{adapter_paths[0]}]", "moe.train.epochs=0"], "epochs must be >= 1"),
        ([f"base={base_path}", f"adapters=[{adapter_paths[0]}]"], "cannot derive a capability label"),
    ]
    for overrides, message in cases:
        with caplog.at_level(logging.INFO):
            code, _, stderr = run_cli("compose", *overrides, f"data={data}", hydra_dir=hydra_dir, capsys=capsys)
        assert code == 2, overrides
        assert message in " ".join(stderr.split()), (overrides, stderr)
        assert not (tmp_path / "outputs").exists(), overrides


def test_an_extended_composition_routes_every_token_as_the_saved_one(tiny, tmp_path):
    """Trained rows that all sit below a constant (e.g. a shared offset, invisible to softmax) must not hand
    tokens to the untrained new slot: its row starts as the mean of the others, a margin lower."""
    from .moe_helpers import load_base

    base_path, adapter_paths = tiny
    saved = ComposedModel.from_pretrained(base_path, adapter_paths[:2], GateConfig(base_bias=1.0, weighting="selection"))
    with torch.no_grad():
        for gate in saved.gates:
            gate.proj.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
            gate.proj.weight -= 2.0 * gate.proj.weight.sum(0, keepdim=True).sign()  # a shared row: no routing change
    tokens = torch.randint(0, 300, (4, 40), generator=torch.Generator().manual_seed(2))
    want = saved(input_ids=tokens).logits
    want_top = [gate.last_weights.argmax(-1) for gate in saved.gates]
    saved.save(tmp_path / "old")
    extended = ComposedModel.extend(tmp_path / "old", adapter_paths[2], "cap2", model=load_base(base_path))
    got = extended(input_ids=tokens).logits
    for gate, top in zip(extended.gates, want_top):
        assert torch.equal(gate.last_weights.argmax(-1), top)
        assert (gate.last_logits[..., 3] < gate.last_logits[..., :3].max(-1).values).all()
    assert torch.allclose(got, want, atol=1e-5)
