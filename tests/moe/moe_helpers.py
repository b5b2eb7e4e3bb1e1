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
