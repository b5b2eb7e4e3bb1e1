"""Gate parameter counts, measured on the real module structure built on the meta device.

For Qwen3-30B-A3B (hidden 2048, 48 decoder blocks) with 4 adapters (5 slots incl. the base slot)
the gates hold 48 x (2048 * 5 + 5) = 491,760 trainable parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trace_moe.adapters import LoraAdapter
from trace_moe.composed import ComposedModel
from trace_moe.gated_lora import GateConfig

QWEN3_30B_A3B = {
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "max_position_embeddings": 262144,
}


@dataclass
class GateCount:
    """Trainable gate parameters of a composition, and the formula's value for comparison."""

    layers: int
    hidden_size: int
    num_slots: int
    trainable: int
    formula: int


def gate_param_formula(layers: int, hidden_size: int, num_adapters: int) -> int:
    """L x (d * (N + 1) + (N + 1)): one Linear(d, N + 1) with bias per block."""
    slots = num_adapters + 1
    return layers * (hidden_size * slots + slots)


def meta_adapters(model: torch.nn.Module, num_adapters: int, rank: int = 16,
                  targets: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj")) -> list[LoraAdapter]:
    """Shape-only LoRA adapters (meta tensors) on every targeted nn.Linear of ``model``."""
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
            weights[name] = (torch.empty(rank, mod.in_features, device="meta"),
                             torch.empty(mod.out_features, rank, device="meta"))
    return [
        LoraAdapter(name=f"adapter{i}", base_model="meta", rank=rank, alpha=float(rank),
                    target_modules=frozenset(targets), weights=weights)
        for i in range(num_adapters)
    ]


def count_qwen3_moe_gates(num_adapters: int = 4, **overrides: int) -> GateCount:
    """Build Qwen3-MoE (default: Qwen3-30B-A3B shape) on meta, compose, and count trainable params."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(**{**QWEN3_30B_A3B, **overrides})
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(config)
        composed = ComposedModel(model, meta_adapters(model, num_adapters), GateConfig())
    report = composed.check_trainable()
    return GateCount(
        layers=composed.num_layers, hidden_size=composed.hidden_size, num_slots=composed.num_slots,
        trainable=report.trainable,
        formula=gate_param_formula(composed.num_layers, composed.hidden_size, num_adapters),
    )
