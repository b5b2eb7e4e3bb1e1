import pytest
import torch
from grpo_toy import BOS, tiny_model

from trace_train.grpo.lora import (
    LoraSettings,
    assert_only_lora_trainable,
    attach_adapter,
    base_fingerprint,
    load_adapter,
    save_adapter,
    versioned_dir,
    versioned_name,
)

torch.set_num_threads(1)


def test_only_lora_trainable_and_base_unchanged_by_training(tmp_path):
    model = attach_adapter(tiny_model(0), "cap", LoraSettings(r=4, alpha=8))
    n = assert_only_lora_trainable(model, "cap")
    # 2 layers x 4 projections x (A + B)
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    assert len(names) == 16 and all("lora_" in x and ".cap." in x for x in names) and n > 0
    before = base_fingerprint(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.tensor([[BOS, 3, 4, 5, 6]])
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert base_fingerprint(model) == before
    lora_b = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert any(float(p.detach().abs().sum()) > 0 for p in lora_b)  # the adapter did move
    # the check catches an unfrozen base weight
    next(p for name, p in model.named_parameters() if "embed_tokens" in name).requires_grad_(True)
    with pytest.raises(RuntimeError, match="non-LoRA"):
        assert_only_lora_trainable(model, "cap")


def test_fingerprint_detects_base_change():
    model = tiny_model(0)
    before = base_fingerprint(model)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1e-3
    assert base_fingerprint(model) != before


def test_save_versioned_and_load_roundtrip(tmp_path):
    model = attach_adapter(tiny_model(0), "cap", LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[BOS, 3, 4, 5]])
    with torch.no_grad():
        want = model(input_ids=ids).logits
        base = tiny_model(0)(input_ids=ids).logits
    assert not torch.allclose(want, base)
    path = save_adapter(model, "cap", versioned_dir(tmp_path, "cap", 7))
    assert path == tmp_path / "adapters" / "cap" / "v0007" and versioned_name("cap", 7) == "cap@7"
    assert (path / "adapter_config.json").exists() and (path / "adapter_model.safetensors").exists()
    loaded = load_adapter(tiny_model(0), path, "cap@7")
    with torch.no_grad():
        got = loaded(input_ids=ids).logits
        with loaded.disable_adapter():
            assert torch.allclose(loaded(input_ids=ids).logits, base, atol=1e-6)
    assert torch.allclose(got, want, atol=1e-6)
    with pytest.raises(ValueError, match="already has an adapter"):
        attach_adapter(attach_adapter(loaded, "other", LoraSettings(r=4)), "other", LoraSettings(r=4))


def test_adapter_init_is_seeded_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    a = attach_adapter(tiny_model(0), "x", LoraSettings(r=4, init_seed=5))
    assert torch.equal(torch.get_rng_state(), state)
    b = attach_adapter(tiny_model(0), "x", LoraSettings(r=4, init_seed=5))
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), na
