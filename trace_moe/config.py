"""The ``moe`` config group (conf/moe/default.yaml) as one typed dataclass: how the gates route and train."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from trace_envs.config_builder import build
from trace_moe.episode_router import EpisodeRouterConfig
from trace_moe.gate_training import GateTrainConfig
from trace_moe.gated_lora import GateConfig


@dataclass
class GateGRPOConfig:
    """Gate-only GRPO (``moe.train.method: grpo_target | grpo_mixture``): seeded groups played by the composed
    model, PPO-clip on the gates only. The keys mean what the ``grpo`` group's keys of the same name mean
    (``trace_train.grpo.config.GRPOConfig``); trained by ``trace_train.grpo.gate_grpo.train_gates_grpo``."""

    iterations: int = 10  # outer iterations: rollout -> advantages -> gate update
    groups_per_iter: int = 8  # groups per iteration (one env seed each)
    group_size: int = 8  # G rollouts per group, sharing the env seed
    lr: float = 5e-3  # AdamW learning rate of the gates
    weight_decay: float = 0.0
    eps: float = 0.2  # lower clip range: ratio >= 1 - eps
    eps_high: float | None = None  # upper clip range (None: same as eps)
    loss_level: Literal["token", "token_seq_mean", "sequence"] = "token"
    advantage_std: Literal["group", "batch", "none"] = "group"
    format_penalty: float = 0.0  # reward -= penalty * (1 - info['format_valid_fraction'])
    grad_clip: float = 1.0  # max global grad norm of the gates (<= 0 disables clipping)
    ppo_epochs: int = 1
    mini_batches: int = 1
    micro_batch_size: int = 4
    old_logprobs: Literal["recompute", "sampler"] = "recompute"
    temperature: float = 1.0  # sampling temperature (log-probs use the same)
    top_p: float = 1.0
    max_new_tokens: int = 96  # per policy turn
    checkpoint_every: int = 5  # iterations between checkpoints (the last one is always saved)
    seed: int = 0  # run seed: env seeds, sampler seeds, env mixture, shuffling
    threads: int = 1  # torch intra-op threads (0 leaves torch's default)
    progress: bool = True  # rich progress bar

    def __post_init__(self) -> None:
        errors = []
        for key in ("iterations", "groups_per_iter", "ppo_epochs", "mini_batches", "micro_batch_size",
                    "checkpoint_every", "max_new_tokens"):
            if int(getattr(self, key)) < 1:
                errors.append(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.group_size < 2:
            errors.append(f"group_size must be >= 2 (advantages are relative to the group), got {self.group_size}")
        if not 0 < self.eps < 1:
            errors.append(f"eps must be in (0, 1), got {self.eps}")
        if self.eps_high is not None and self.eps_high <= 0:
            errors.append(f"eps_high must be > 0, got {self.eps_high}")
        if not (self.lr > 0 and self.temperature > 0):  # NaN included
            errors.append(f"lr and temperature must be > 0, got {self.lr} and {self.temperature}")
        if self.weight_decay < 0 or self.format_penalty < 0 or self.threads < 0:
            errors.append("weight_decay, format_penalty and threads must be >= 0")
        if not 0 < self.top_p <= 1:
            errors.append(f"top_p must be in (0, 1], got {self.top_p}")
        if errors:
            raise ValueError("; ".join(errors))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RoutingTargetsConfig:
    """Gate data from the target (``moe.train.method: routing_targets``): every slot alone (the base, the base with
    each adapter) plays ``samples`` episodes on each of ``seeds`` training seeds of the target from
    ``seed_offset``. ``label: best``: each seed's best slot (``trace_moe.routing_targets``) labels every successful
    episode of it; ``label: solvers``: every successful episode of a seed is an example once per slot that solved
    the seed, so the gates fit the share of solvers (the paper's warm start: a KL to each seed's distribution of
    rewards over the slots) and their top-1 is the slot that solves tasks like it most often. The episode router
    (``gate.scope: episode``) reads each seed's opening request instead, its target the best slot one-hot
    (``best``) or the seed's distribution of reward over the slots (``solvers``; seeds no slot solved left out)."""

    seeds: int = 64  # target training seeds
    samples: int = 4  # episodes per slot and seed (sampled at the pipeline policy's temperature)
    seed_offset: int = 0  # first seed index of the target's training split
    greedy: bool = False  # decode greedily (one episode per slot and seed: samples must be 1), as a greedy eval does
    label: str = "best"  # best | solvers (above)

    def __post_init__(self) -> None:
        if self.label not in ("best", "solvers"):
            raise ValueError(f"routing targets: label must be 'best' or 'solvers', got {self.label!r}")
        if self.seeds < 1 or self.samples < 1 or self.seed_offset < 0:
            raise ValueError(f"seeds and samples must be >= 1 and seed_offset >= 0, got {self.seeds}, "
                             f"{self.samples}, {self.seed_offset}")
        if self.greedy and self.samples != 1:
            raise ValueError(f"greedy routing targets play one episode per slot and seed: samples must be 1, "
                             f"got {self.samples}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MoEConfig:
    """``gate``: routing of the composed model (top-k, init, base bias, token or episode scope); ``train``: the gate
    optimisation (``train.method`` picks supervised, routing targets or gate-only GRPO); ``grpo``: the settings of
    gate-only GRPO; ``routing``: those of the routing targets; ``episode_router``: the router of
    ``gate.scope: episode``."""

    gate: GateConfig = field(default_factory=GateConfig)
    train: GateTrainConfig = field(default_factory=GateTrainConfig)
    grpo: GateGRPOConfig = field(default_factory=GateGRPOConfig)
    routing: RoutingTargetsConfig = field(default_factory=RoutingTargetsConfig)
    episode_router: EpisodeRouterConfig = field(default_factory=EpisodeRouterConfig)

    def __post_init__(self) -> None:
        if self.gate.scope == "episode" and self.train.method not in ("supervised", "routing_targets"):
            raise ValueError(f"moe.gate.scope=episode trains its router on the capability envs' successes "
                             f"(moe.train.method=supervised) or on the target's routing targets "
                             f"(routing_targets), not {self.train.method!r}")

    def hash_part(self) -> dict[str, Any]:
        """``asdict`` as run-directory stage hashes see it: keys added after runs existed are left out while they
        hold their default, so those runs keep their composed stages."""
        part = asdict(self)
        part["grpo"]["progress"] = True  # a progress bar changes nothing composed: hashed as its default
        if self.gate.scope == "token":
            part["gate"].pop("scope")
        if self.episode_router == EpisodeRouterConfig():
            part.pop("episode_router")
        return part

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "moe") -> MoEConfig:
        """Build strictly from the ``moe`` group (a mapping or DictConfig): unknown or mistyped keys fail with
        their path (``moe.train.epochs: expected int, got 'x' (str)``)."""
        return build(cls, data, path)
