"""Review 43: LoRA targets that peft maps onto fused MoE expert parameters (``grpo=paper`` on a Qwen3-MoE base) are
named before training (one warning), and the composition refuses the saved adapter for that reason."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from trace_moe import load_adapters
from trace_train.grpo.lora import LoraSettings, attach_adapter, save_adapter

torch.set_num_threads(1)
PAPER_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # conf/grpo/paper.yaml


def _tiny_moe() -> Qwen3MoeForCausalLM:
    cfg = Qwen3MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1)
    torch.manual_seed(0)  # test-only: HF module init draws from the global generator
    return Qwen3MoeForCausalLM(cfg).eval()


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "trace_train.grpo.lora" and r.levelno == logging.WARNING]


def test_paper_targets_on_fused_experts_warn_once_and_do_not_compose(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="trace_train.grpo.lora")
    model = attach_adapter(_tiny_moe(), "cap_a", LoraSettings(r=4, alpha=4, target_modules=PAPER_TARGETS))
    [message] = _warnings(caplog)
    assert "'cap_a'" in message and "gate_up_proj" in message and "will not compose" in message
    saved = save_adapter(model, "cap_a", tmp_path / "adapters" / "cap_a" / "v0001")
    with pytest.raises(ValueError, match=r"fused MoE expert parameters \(target_parameters="):
        load_adapters([saved])


def test_attention_targets_on_a_moe_base_do_not_warn(caplog):
    caplog.set_level(logging.WARNING, logger="trace_train.grpo.lora")
    attach_adapter(_tiny_moe(), "cap_a", LoraSettings(r=4, alpha=4))
    assert _warnings(caplog) == []
