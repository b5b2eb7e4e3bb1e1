"""A small GRPO config for trainer tests on the shipped base: one iteration, rank-4 LoRA, one thread, no logging."""

from trace_train.grpo import GRPOConfig
from trace_train.grpo.lora import LoraSettings


def small_grpo_config(**overrides) -> GRPOConfig:
    """One iteration of 2 groups x 4 members at lr 5e-3, 64 new tokens per turn, seed 5; ``overrides`` replace keys."""
    base = dict(iterations=1, groups_per_iter=2, group_size=4, lr=5e-3, micro_batch_size=4, checkpoint_every=1,
                max_new_tokens=64, seed=5, threads=1, tensorboard=False, progress=False,
                lora=LoraSettings(r=4, alpha=8))
    base.update(overrides)
    return GRPOConfig(**base)
