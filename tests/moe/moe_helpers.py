"""Tiny Qwen3 models and random peft LoRA adapters for the trace_moe tests."""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

VOCAB = 300
TARGETS = ["q_proj", "v_proj", "o_proj", "up_proj"]


def tiny_config(hidden: int = 64, layers: int = 2, vocab: int = VOCAB) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=256,
        tie_word_embeddings=False,
    )


def make_base(root: Path, seed: int = 0, **cfg) -> Path:
    """Save a randomly initialised tiny Qwen3 causal LM to ``root/base`` and return the path."""
    torch.manual_seed(seed)  # test-only: HF module init draws from the global generator
    model = Qwen3ForCausalLM(tiny_config(**cfg)).eval()
    path = root / "base"
    model.save_pretrained(path)
    return path


def load_base(path: Path) -> Qwen3ForCausalLM:
    return Qwen3ForCausalLM.from_pretrained(str(path)).eval()


def make_adapter(base_path: Path, out: Path, seed: int, rank: int = 4, alpha: float = 8.0,
                 targets: list[str] | None = None, std: float = 0.3) -> Path:
    """A peft LoRA adapter with random non-zero A and B (so adapters differ from base and each other)."""
    model = load_base(base_path)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets or TARGETS))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    peft_model.save_pretrained(out)
    return out


def make_adapters(root: Path, base_path: Path, n: int = 3, **kw) -> list[Path]:
    return [make_adapter(base_path, root / f"cap{i}", seed=100 + i, **kw) for i in range(n)]


def token_ids(seed: int = 1, shape=(2, 9)) -> torch.Tensor:
    """Random token ids below the tiny vocabulary, from their own seeded generator."""
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def assert_slots_are_their_peft_adapters(composed, base_path: Path, adapter_paths, ids: torch.Tensor) -> list:
    """Each adapter slot forced alone gives exactly its peft adapter's logits (and, through the dense gated path of a
    per-sequence forcing, the same up to rounding); each adapter changes the base. Returns the peft logits."""
    from peft import PeftModel

    base_logits = load_base(base_path)(ids).logits
    outputs = []
    for slot, path in enumerate(adapter_paths, start=1):
        peft_logits = PeftModel.from_pretrained(load_base(base_path), str(path)).eval()(ids).logits
        assert (peft_logits - base_logits).abs().max() > 1e-2, "each adapter must change the model"
        with composed.forcing(slot):
            assert torch.equal(composed(ids).logits, peft_logits)
        with composed.forcing(torch.full((ids.shape[0],), slot)):
            torch.testing.assert_close(composed(ids).logits, peft_logits, rtol=1e-5, atol=1e-5)
        outputs.append(peft_logits)
    return outputs
