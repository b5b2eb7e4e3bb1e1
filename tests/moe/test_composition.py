"""Gated composition: exactness against peft, routing math, KV-cache decoding, freezing, persistence."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from peft import PeftModel

from trace_moe import ComposedModel, GateConfig, load_adapters
from trace_moe.gated_lora import GatedLoRALinear

from .moe_helpers import assert_slots_are_their_peft_adapters, load_base, make_adapter
from .moe_helpers import token_ids as _ids


def _randomize_gates(composed: ComposedModel, seed: int = 7, scale: float = 3.0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for gate in composed.gates:
            gate.proj.weight.copy_(torch.randn(gate.proj.weight.shape, generator=gen) * scale)
            gate.proj.bias.copy_(torch.randn(gate.proj.bias.shape, generator=gen))


@torch.no_grad()
def test_forced_slots_equal_base_and_each_peft_adapter(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths)
    ids = _ids()
    base_logits = load_base(base_path)(ids).logits
    with composed.forcing(0):
        assert torch.equal(composed(ids).logits, base_logits)
    seen = assert_slots_are_their_peft_adapters(composed, base_path, adapter_paths, ids)
    assert (seen[0] - seen[1]).abs().max() > 1e-2, "adapters must differ from each other"


@torch.no_grad()
@pytest.mark.parametrize("top_k", [1, 2])
def test_gated_linear_matches_switch_formula(tiny, top_k):
    base_path, adapter_paths = tiny
    adapters = load_adapters(adapter_paths)
    composed = ComposedModel(load_base(base_path), adapters, GateConfig(top_k=top_k, init="zero"))
    _randomize_gates(composed)
    name = "model.layers.1.self_attn.q_proj"
    layer: GatedLoRALinear = composed.model.get_submodule(name)
    x = torch.randn(2, 5, composed.hidden_size, generator=torch.Generator().manual_seed(3))
    layer.gate.route(x)
    got = layer(x)
    probs = layer.gate.proj(x).softmax(-1)
    top_p, top_i = probs.topk(top_k, -1)
    expected = layer.base_layer(x)
    for b in range(2):
        for t in range(5):
            for p, s in zip(top_p[b, t], top_i[b, t]):
                if s == 0:
                    continue
                a, bb = adapters[s - 1].weights[name]
                expected[b, t] += p * adapters[s - 1].scale * (bb @ (a @ x[b, t]))
    assert (top_i != 0).any(), "the random gate should pick some adapters"
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_generate_with_kv_cache_routes_every_token(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(init="zero"))
    _randomize_gates(composed)
    prompt = _ids(2, (1, 6))
    kw = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    with_cache = composed.generate(prompt, use_cache=True, **kw)
    # the last decoding step ran the gates on the single new token
    assert composed.gates[0].last_logits.shape[:2] == (1, 1)
    without_cache = composed.generate(prompt, use_cache=False, **kw)
    assert torch.equal(with_cache, without_cache)
    # and the routing of the generated sequence uses adapters, not only the base slot
    routed = composed(with_cache).logits
    slots = torch.stack([g.last_logits.argmax(-1) for g in composed.gates])
    assert (slots != 0).any() and routed.shape[1] == with_cache.shape[1]
    # the forced oracle path generates exactly what peft generates with that adapter
    peft_model = PeftModel.from_pretrained(load_base(base_path), str(adapter_paths[1])).eval()
    with composed.forcing(2):
        assert torch.equal(composed.generate(prompt, **kw), peft_model.generate(prompt, **kw))


def test_only_gates_trainable(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths)
    report = composed.check_trainable()
    d, layers, slots = composed.hidden_size, composed.num_layers, composed.num_slots
    assert report.trainable == layers * (d * slots + slots) == 2 * (64 * 4 + 4)
    assert report.frozen == sum(p.numel() for p in load_base(base_path).parameters())
    assert all(n.startswith("gates.") for n in report.trainable_names)
    composed.model.model.embed_tokens.weight.requires_grad_(True)
    with pytest.raises(AssertionError, match="embed_tokens"):
        composed.check_trainable()


def test_qwen3_30b_a3b_gate_count_on_meta():
    from trace_moe import count_qwen3_moe_gates

    count = count_qwen3_moe_gates(num_adapters=4)
    assert (count.layers, count.hidden_size, count.num_slots) == (48, 2048, 5)
    assert count.trainable == 491_760 == count.formula


@torch.no_grad()
def test_save_load_round_trip_and_hash_check(tiny, tmp_path):
    base_path, adapter_paths = tiny
    local = [shutil.copytree(p, tmp_path / p.name) for p in adapter_paths]
    composed = ComposedModel.from_pretrained(base_path, local, GateConfig(top_k=2, init="zero"))
    _randomize_gates(composed, seed=11)
    ids = _ids(4)
    expected = composed(ids).logits
    out = composed.save(tmp_path / "composed")
    meta = json.loads((out / "compose.json").read_text())
    assert [a["name"] for a in meta["adapters"]] == ["cap0", "cap1", "cap2"]
    assert all(len(a["sha256"]) == 64 for a in meta["adapters"])
    loaded = ComposedModel.load(out)
    assert loaded.gate_config.top_k == 2
    assert torch.equal(loaded(ids).logits, expected)
    cfg = local[1] / "adapter_config.json"
    cfg.write_text(cfg.read_text().replace('"lora_alpha": 8', '"lora_alpha": 9'))
    with pytest.raises(ValueError, match="cap1.*content hash"):
        ComposedModel.load(out)


def test_incompatible_adapters_raise_naming_the_offender(tiny, tmp_path):
    base_path, adapter_paths = tiny
    other_rank = make_adapter(base_path, tmp_path / "rank8", seed=5, rank=8)
    with pytest.raises(ValueError, match="'rank8' has rank 8"):
        load_adapters([adapter_paths[0], other_rank])
    moved = shutil.copytree(adapter_paths[2], tmp_path / "elsewhere")
    cfg = moved / "adapter_config.json"
    data = json.loads(cfg.read_text())
    data["base_model_name_or_path"] = "another/base"
    cfg.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="'elsewhere' was trained on base 'another/base'"):
        ComposedModel.from_pretrained(base_path, [adapter_paths[0], moved])
    with pytest.raises(ValueError, match="not a peft adapter"):
        load_adapters([tmp_path])
