"""Composing adapters that adapt different modules: the union is adapted, each adapter exactly as peft runs it."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel

from trace_moe import ComposedModel, GateConfig, LoraAdapter, adapted_modules, check_compatible, load_adapters
from trace_moe.routers import static_merge

from .moe_helpers import assert_slots_are_their_peft_adapters, load_base, make_adapter
from .moe_helpers import token_ids as _ids

LAYER1_ATTENTION = ["layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj"]


@pytest.fixture(scope="module")
def mixed(tiny, tmp_path_factory):
    """The full adapter cap0 (q, v, o, up on both layers), one on q_proj only, one on layer 1's q and v only."""
    base_path, adapter_paths = tiny
    root = tmp_path_factory.mktemp("mixed")
    q_only = make_adapter(base_path, root / "q_only", seed=31, targets=["q_proj"])
    layer1 = make_adapter(base_path, root / "layer1", seed=32, targets=LAYER1_ATTENTION)
    return base_path, [adapter_paths[0], q_only, layer1]


def test_the_composition_adapts_the_union_and_zero_where_an_adapter_does_not(mixed):
    base_path, paths = mixed
    adapters = load_adapters(paths)
    assert [len(a.weights) for a in adapters] == [8, 2, 2]
    union = adapted_modules(adapters)
    assert union == sorted(adapters[0].weights)  # the full adapter's modules hold the others'
    composed = ComposedModel(load_base(base_path), adapters)
    assert composed.adapted_modules == union
    q0 = composed.model.get_submodule("model.layers.0.self_attn.q_proj")
    v0 = composed.model.get_submodule("model.layers.0.self_attn.v_proj")
    r = q0.rank
    # slot 3 (layer-1 adapter) holds zeros in layer 0; slot 2 (q only) holds its weights on q and zeros on v
    assert not q0.lora_a[2 * r:].any() and not q0.lora_b[:, 2 * r:].any()
    assert q0.lora_a[r:2 * r].abs().sum() > 0 and not v0.lora_a[r:2 * r].any()
    assert torch.equal(q0.lora_a[:r], adapters[0].weights["model.layers.0.self_attn.q_proj"][0])


@torch.no_grad()
def test_each_forced_slot_is_exactly_its_peft_adapter(mixed):
    base_path, paths = mixed
    composed = ComposedModel.from_pretrained(base_path, paths)
    outputs = assert_slots_are_their_peft_adapters(composed, base_path, paths, _ids())
    assert (outputs[1] - outputs[2]).abs().max() > 1e-2


@torch.no_grad()
def test_per_token_routing_across_mixed_adapters_round_trips(mixed, tmp_path):
    base_path, paths = mixed
    composed = ComposedModel.from_pretrained(base_path, paths, GateConfig(init="zero"))
    gen = torch.Generator().manual_seed(5)
    for gate in composed.gates:
        gate.proj.weight.copy_(torch.randn(gate.proj.weight.shape, generator=gen) * 3.0)
    ids = _ids(3)
    expected = composed(ids).logits
    chosen = torch.stack([g.last_logits.argmax(-1) for g in composed.gates])
    assert len(chosen.unique()) >= 3, "the random gates should route tokens to several slots"
    loaded = ComposedModel.load(composed.save(tmp_path / "composed"))
    assert torch.equal(loaded(ids).logits, expected)


def test_an_extended_composition_takes_an_adapter_on_other_modules(tiny, mixed, tmp_path):
    base_path, paths = mixed
    ComposedModel.from_pretrained(base_path, paths[:2]).save(tmp_path / "old")
    extended = ComposedModel.extend(tmp_path / "old", paths[2], "layer1", model=load_base(base_path))
    assert extended.slot_names == ["base", "cap0", "q_only", "layer1"]
    ids = _ids(4)
    peft_logits = PeftModel.from_pretrained(load_base(base_path), str(paths[2])).eval()(ids).logits
    with torch.no_grad(), extended.forcing(3):
        assert torch.equal(extended(ids).logits, peft_logits)


@torch.no_grad()
def test_static_merge_of_mixed_adapters_is_the_weighted_sum(mixed):
    base_path, paths = mixed
    ids = _ids(5)
    only_layer1 = static_merge(load_base(base_path), paths, weights=[0.0, 0.0, 1.0])(ids).logits
    peft_logits = PeftModel.from_pretrained(load_base(base_path), str(paths[2])).eval()(ids).logits
    torch.testing.assert_close(only_layer1, peft_logits, rtol=1e-5, atol=1e-5)


def test_a_shared_module_with_other_lora_shapes_is_refused_naming_both():
    def adapter(name: str, in_features: int) -> LoraAdapter:
        module = "model.layers.0.self_attn.q_proj"
        return LoraAdapter(name=name, base_model="b", rank=2, alpha=2.0, target_modules=frozenset({"q_proj"}),
                           weights={module: (torch.zeros(2, in_features), torch.zeros(8, 2))})

    with pytest.raises(ValueError, match=r"'wide' has LoRA shapes A\(2, 16\).*'narrow' A\(2, 8\)"):
        check_compatible([adapter("narrow", 8), adapter("wide", 16)])
    check_compatible([adapter("narrow", 8), adapter("other", 8)])
