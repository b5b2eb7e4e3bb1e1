"""Seeded-group GRPO of one LoRA adapter per capability (paper §4).

Modules: ``seeds`` (env/sampler seeds), ``advantages`` (group normalization), ``loss`` (PPO-clip,
KL, SFT), ``lora`` (adapters), ``logprobs`` / ``update`` (the policy step), ``checkpoint``,
``metrics``, ``dist`` and ``trainer`` (``GRPOTrainer``).
"""

from trace_train.grpo.advantages import Advantages, group_advantages
from trace_train.grpo.config import GRPOConfig
from trace_train.grpo.lora import LoraSettings
from trace_train.grpo.loss import LossOutput, grpo_loss, sft_loss
from trace_train.grpo.seeds import GroupSeeds, plan_iteration
from trace_train.grpo.trainer import GRPOTrainer, TrainResult

__all__ = [
    "Advantages",
    "GRPOConfig",
    "GRPOTrainer",
    "GroupSeeds",
    "LoraSettings",
    "LossOutput",
    "TrainResult",
    "grpo_loss",
    "group_advantages",
    "plan_iteration",
    "sft_loss",
]
