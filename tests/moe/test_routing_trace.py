"""Routing trace: per generated token the slot the gates chose (teacher-forced over recorded ids), per capability."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from trace_envs.records import task_capabilities
from trace_moe import ComposedModel, GateConfig
from trace_moe.routing_trace import NO_ANNOTATION, capability_table, route_record, routing_trace
from trace_train.paths import shipped_checkpoint
from trace_train.pipeline.policy_play import play
from trace_train.policies import PolicySpec

from .moe_helpers import make_adapter


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The shipped tiny base, two random adapters composed over it, and three real retail-sim records."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("routing_trace")
    base = shipped_checkpoint()
    adapters = [make_adapter(base, root / f"cap{i}", seed=300 + i, std=0.05) for i in range(2)]
    spec = PolicySpec(kind="hf", name="base", model=str(base), max_new_tokens=16, temperature=1.0)
    records = play(spec, "trace/retail-sim-v0", "test", 3, batch=3)
    composed = ComposedModel.from_pretrained(base, adapters, GateConfig(init="zero"), adapter_names=["a", "b"])
    return composed, records, AutoTokenizer.from_pretrained(str(base))


def test_slots_cover_every_generated_token_and_are_in_range(setup):
    composed, records, tok = setup
    trace = routing_trace(composed, records, decode=lambda i: tok.decode([i]))
    assert trace.slot_names == ["base", "a", "b"]
    assert len(trace.records) == len(records) == 3
    for rec, r in zip(records, trace.records):
        generated = [i for i, m in zip(rec.token_ids, rec.loss_mask) if m]
        assert r.token_ids == generated and len(generated) > 0  # the generated tokens, none left out
        assert len(r.slots) == len(r.tokens) == len(generated)
        assert all(0 <= s < 3 for s in r.slots)
        assert len(r.layer_slots) == composed.num_layers and all(len(x) == len(generated) for x in r.layer_slots)
        assert "".join(r.tokens) == tok.decode(generated)
        assert r.capabilities == (task_capabilities(rec.info) or [])
    assert any(r.capabilities for r in trace.records)  # retail-sim tasks carry capability annotations


@pytest.mark.parametrize("slot", [0, 1, 2])
def test_a_huge_gate_bias_routes_every_token_to_that_slot(setup, slot):
    composed, records, _ = setup
    saved = [g.proj.bias.detach().clone() for g in composed.gates]
    try:
        with torch.no_grad():
            for g in composed.gates:
                g.proj.bias.zero_()
                g.proj.bias[slot] = 1e4
        trace = routing_trace(composed, records)
    finally:
        with torch.no_grad():
            for g, b in zip(composed.gates, saved):
                g.proj.bias.copy_(b)
    assert all(set(r.slots) == {slot} for r in trace.records)
    for row in trace.by_capability:
        assert row.shares[slot] == pytest.approx(1.0)


def test_forcing_is_what_the_trace_reports(setup):
    composed, records, _ = setup
    with composed.forcing(2):
        r = route_record(composed, records[0])
    assert set(r.slots) == {2} and all(set(layer) == {2} for layer in r.layer_slots)


def test_capability_table_shares_sum_to_one_and_count_each_task(setup):
    composed, records, _ = setup
    trace = routing_trace(composed, records)
    assert trace.by_capability
    for row in trace.by_capability:
        assert sum(row.shares) == pytest.approx(1.0)
        needing = [r for r in trace.records if row.capability in (r.capabilities or [NO_ANNOTATION])]
        assert row.tasks == len(needing)
        assert row.tokens == sum(len(r.slots) for r in needing)
    # a random zero-init gate does not send everything to one slot on every task
    first = trace.by_capability[0]
    counts = [0, 0, 0]
    for r in trace.records:
        if first.capability in (r.capabilities or [NO_ANNOTATION]):
            for s in r.slots:
                counts[s] += 1
    assert first.shares == pytest.approx([c / sum(counts) for c in counts])


def test_hand_built_table_and_bad_records(setup):
    composed, records, _ = setup
    from trace_moe.routing_trace import RecordRouting

    rows = [RecordRouting("x", "e", 0, True, ["p", "q"], [1, 2], [5, 6], [0, 1], [[0, 1]]),
            RecordRouting("y", "e", 1, False, ["p"], [1, 2], [5, 6], [1, 1], [[1, 1]]),
            RecordRouting("z", "e", 2, False, [], [1], [5], [2], [[2]])]
    table = {row.capability: row for row in capability_table(rows, 3)}
    assert table["p"].shares == pytest.approx([0.25, 0.75, 0.0]) and table["p"].tasks == 2
    assert table["q"].shares == pytest.approx([0.5, 0.5, 0.0])
    assert table[NO_ANNOTATION].shares == pytest.approx([0.0, 0.0, 1.0])
    bad = records[0].__class__(**{**records[0].to_dict(), "loss_mask": [1]})
    with pytest.raises(ValueError, match="loss mask length"):
        route_record(composed, bad)


def test_write_routing_trace_samples_a_saved_composition(setup, tmp_path):
    import json

    from trace_moe.routing_trace import write_routing_trace
    from trace_train.trajectory import write_trajectories

    composed, records, tok = setup
    composed.save(tmp_path / "composed")
    write_trajectories(tmp_path / "traj.jsonl", records)
    out = write_routing_trace(tmp_path / "composed", tmp_path / "traj.jsonl", tmp_path / "rt.json", sample=2,
                              max_tokens=5)
    doc = json.loads((tmp_path / "rt.json").read_text())
    assert out["sample"] == 2 and doc["sample"] == 2 and doc["slot_names"] == ["base", "a", "b"]
    direct = {r.episode_id: r for r in routing_trace(composed, records).records}
    for rec in doc["records"]:
        full = direct[rec["id"]]
        assert rec["slots"] == full.slots[:5] and len(rec["tokens"]) == len(rec["slots"]) <= 5
        assert rec["n_tokens"] == len(full.slots) and rec["caps"] == full.capabilities
    assert all(sum(row["shares"]) == pytest.approx(1.0) for row in doc["by_capability"])
