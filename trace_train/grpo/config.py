"""Typed GRPO configuration; mirrors ``conf/grpo/default.yaml`` key for key."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from trace_envs.config_builder import build
from trace_envs.hints import envs_without_hints, hinted_count
from trace_train.grpo.lora import LoraSettings
from trace_train.grpo.loss import LEVELS, LOSS_DENOMINATORS
from trace_train.grpo.packing import PACKING_MODES


@dataclass
class GRPOConfig:
    """Seeded-group GRPO hyper-parameters (paper defaults where the paper states one)."""

    iterations: int = 10  # outer iterations: rollout → advantages → update
    groups_per_iter: int = 8  # groups per iteration (one env seed each)
    group_size: int = 16  # G rollouts per group, sharing the env seed
    lr: float = 1e-5  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    eps: float = 0.2  # lower clip range: ratio >= 1 - eps
    eps_high: float | None = None  # upper clip range (None: same as eps)
    loss_level: str = "token"  # token | token_seq_mean | sequence (see trace_train.grpo.loss)
    advantage_std: str = "group"  # group | batch | none
    adv_eps: float = 1e-6  # ε in (r - mean) / (std + ε)
    kl_beta: float = 0.0  # β of the k3 KL to the base (adapter disabled); 0 = paper
    format_penalty: float = 0.0  # reward -= penalty * (1 - info['format_valid_fraction'])
    grad_clip: float = 1.0  # max global grad norm (<= 0 disables clipping)
    ppo_epochs: int = 1  # passes over each iteration's samples
    mini_batches: int = 1  # optimizer steps per epoch (samples split into this many mini-batches)
    micro_batch_size: int = 4  # sequences per forward/backward (gradient accumulation)
    packing: str = "bucketed"  # none (pad each micro-batch) | bucketed (sort by length) | packed (one row, no pad)
    old_logprobs: str = "recompute"  # recompute (trainer, before the update) | sampler (from the backend)
    temperature: float = 1.0  # sampling temperature (log-probs are computed at the same temperature)
    top_p: float = 1.0
    max_new_tokens: int = 96  # per policy turn
    checkpoint_every: int = 5  # iterations between checkpoints (the last one is always saved)
    # run seed: env seeds, sampler seeds, env mixture, hinted members, mini-batch shuffling, LoRA dropout masks;
    # not the LoRA init, which lora.init_seed alone draws (so every run seed starts from the same adapter)
    seed: int = 0
    threads: int = 1  # torch intra-op threads (0 leaves torch's default)
    mode: str = "grpo"  # grpo | sft (cross-entropy on successful records only)
    # grpo mode: the first N iterations update by cross-entropy on their successful rollouts (hinted ones under
    # the unhinted prompt), then GRPO — a warm start outside the paper's recipe (it trains GRPO from the base)
    sft_warmup_iterations: int = 0
    hint_fraction: float = 0.0  # share of each group that plays with the env's hint (paper §3.5: 0.25-0.5)
    # groups come in pairs on one env seed, the second group playing the env's counterfactual twin of the first's
    # task (reset(options={"twin": True}): the same world with the decision flipped, trace_envs.twins)
    twin_groups: bool = False
    # what the loss is averaged over: the tokens (sequences) of the samples that carry signal (constant-reward groups
    # are dropped, so one informative group takes as large a step as eight), or of every sampled record, as TRL's
    # GRPOTrainer averages over its zero-advantage completions too (the step shrinks with the share of informative
    # groups); see trace_train.grpo.loss.denominator_scale
    loss_denominator: str = "informative"
    tensorboard: bool = True  # also log to TensorBoard when torch.utils.tensorboard imports
    trackers: list[str] = field(default_factory=list)  # experiment trackers: wandb and/or trackio (installed)
    tracker_project: str = "trace-rl"  # the trackers' project name (the run is named after the adapter)
    progress: bool = True  # rich progress bar on rank 0
    lora: LoraSettings = field(default_factory=LoraSettings)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], path: str = "grpo") -> "GRPOConfig":
        """Build from a plain mapping (e.g. the ``grpo`` group); an unknown or mistyped key fails with its path.

        ``trackers`` may be one name (``grpo.trackers=wandb``) as well as a list."""
        data = dict(data)
        if isinstance(data.get("trackers"), str):
            data["trackers"] = [data["trackers"]]
        return build(cls, data, path)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hash_part(self) -> dict[str, Any]:
        """``to_dict()`` as run-directory stage hashes see it: keys added after runs existed are left out while
        they hold their default, so those runs keep their hashes (and their trained stages); the logging-only
        keys (``LOGGING_KEYS``) always hash as their defaults, so changing one retrains nothing."""
        part = self.to_dict()
        defaults = GRPOConfig().to_dict()
        part.update({key: defaults[key] for key in LOGGING_KEYS})
        for key, default in ADDED_LATER.items():
            if part[key] == default:
                part.pop(key)
        return part

    def mode_at(self, iteration: int) -> str:
        """How iteration ``iteration`` (0-based) updates: ``sft`` in SFT mode and during the SFT warm-up."""
        return "sft" if self.mode == "sft" or iteration < self.sft_warmup_iterations else "grpo"

    def validate(self) -> None:
        """Raise ``ValueError`` with a clear message on any inconsistent value."""
        errors = []
        if self.mode not in ("grpo", "sft"):
            errors.append(f"mode must be 'grpo' or 'sft', got {self.mode!r}")
        if self.mode == "grpo" and self.group_size < 2:
            errors.append(
                f"grpo.group_size must be >= 2 for GRPO (advantages are relative to the group), got {self.group_size}; "
                "set grpo.group_size=<integer >= 2>"
            )
        if self.group_size < 1:
            errors.append(f"group_size must be >= 1, got {self.group_size}")
        for key in (
            "iterations",
            "groups_per_iter",
            "ppo_epochs",
            "mini_batches",
            "micro_batch_size",
            "checkpoint_every",
        ):
            if getattr(self, key) < 1:
                errors.append(f"{key} must be >= 1, got {getattr(self, key)}")
        if not 0 < self.eps < 1:
            errors.append(f"eps must be in (0, 1), got {self.eps}")
        if self.eps_high is not None and self.eps_high <= 0:
            errors.append(f"eps_high must be > 0, got {self.eps_high}")
        if self.loss_level not in LEVELS:
            errors.append(f"loss_level must be one of {LEVELS}, got {self.loss_level!r}")
        if self.loss_denominator not in LOSS_DENOMINATORS:
            errors.append(f"loss_denominator must be one of {LOSS_DENOMINATORS}, got {self.loss_denominator!r}")
        elif self.loss_denominator == "sampled" and self.kl_beta > 0:
            # the constant groups' records are not run through the model, and their KL term is not 0
            errors.append("loss_denominator=sampled counts the constant groups' records without running them, so it "
                          "cannot add their KL term: set kl_beta=0 or loss_denominator=informative")
        if self.advantage_std not in ("group", "batch", "none"):
            errors.append(f"advantage_std must be group|batch|none, got {self.advantage_std!r}")
        if self.packing not in PACKING_MODES:
            errors.append(f"packing must be one of {PACKING_MODES}, got {self.packing!r}")
        if self.old_logprobs not in ("recompute", "sampler"):
            errors.append(f"old_logprobs must be recompute|sampler, got {self.old_logprobs!r}")
        if self.kl_beta < 0 or self.format_penalty < 0 or self.lr <= 0:
            errors.append("kl_beta and format_penalty must be >= 0 and lr > 0")
        if self.temperature <= 0:
            errors.append(f"temperature must be > 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            errors.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.weight_decay < 0:
            errors.append(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.lora.dropout < 1.0 or self.lora.alpha <= 0 or not self.lora.target_modules:
            errors.append(f"lora needs dropout in [0, 1), alpha > 0 and target modules, got dropout "
                          f"{self.lora.dropout}, alpha {self.lora.alpha}, target_modules {self.lora.target_modules}")
        try:
            hinted_count(self.hint_fraction, self.group_size)
        except ValueError as exc:
            errors.append(str(exc))
        if self.lora.r < 1:
            errors.append(f"lora.r must be >= 1, got {self.lora.r}")
        if self.max_new_tokens < 1:
            errors.append(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.threads < 0:
            errors.append(f"threads must be >= 0, got {self.threads}")
        if self.twin_groups and self.groups_per_iter % 2:
            errors.append(f"twin_groups needs an even groups_per_iter (pairs of groups), got {self.groups_per_iter}")
        if self.sft_warmup_iterations < 0:
            errors.append(f"sft_warmup_iterations must be >= 0, got {self.sft_warmup_iterations}")
        from trace_train.grpo.metrics import check_trackers

        try:
            check_trackers(self.trackers)
        except ValueError as exc:
            errors.append(str(exc))
        if errors:
            raise ValueError("invalid GRPO config:\n  - " + "\n  - ".join(errors))


# GRPOConfig keys that change how a run logs, never what it trains
LOGGING_KEYS = frozenset({"progress", "tensorboard", "trackers", "tracker_project"})

# GRPOConfig keys added after run directories existed, with the default that leaves them out of stage hashes (and
# that a run made before them trained with: resuming one compares the key with it)
ADDED_LATER: dict[str, Any] = {"sft_warmup_iterations": 0, "twin_groups": False, "loss_denominator": "informative"}


def normalize_envs(env: str | Mapping[str, float]) -> dict[str, float]:
    """``"a"`` → ``{"a": 1.0}``; ``{"a": 2, "b": 1}`` stays a weighted mixture (weights > 0)."""
    if isinstance(env, str):
        return {env: 1.0}
    mixture = {str(k): float(v) for k, v in dict(env).items()}
    if not mixture or any(w <= 0 for w in mixture.values()):
        raise ValueError(f"env mixture needs >= 1 env id with weight > 0, got {mixture}")
    return mixture


def check_env_ids(env_ids: list[str], imports: list[str] | None = None,
                  run_dirs: list[str] | None = None) -> None:
    """Fail unless every id resolves (``trace_envs.env_refs.resolve_env_ids``, the resolver every command uses)."""
    from trace_envs.env_refs import resolve_env_ids

    resolve_env_ids(env_ids, imports=imports or (), run_dirs=run_dirs or ())


def check_reset_options(config: GRPOConfig, env_ids: list[str], env_kwargs: Mapping[str, Any]) -> None:
    """Fail before any work unless every env honours the reset options ``config`` asks for (hints, twins)."""
    if config.hint_fraction > 0:
        check_hint_support(env_ids, env_kwargs)
    if config.twin_groups:
        check_twin_support(env_ids, env_kwargs)


def check_hint_support(env_ids: list[str], env_kwargs: Mapping[str, Any]) -> None:
    """Fail unless every env supports ``reset(options={"hint": True})`` (grpo.hint_fraction > 0)."""
    missing = envs_without_hints(env_ids, env_kwargs)
    if missing:
        raise ValueError(f"grpo.hint_fraction > 0 but {missing[0]!r} does not support hints on "
                         f"reset(options={{'hint': True}}) (see trace_envs.hints; set grpo.hint_fraction=0)")


def check_twin_support(env_ids: list[str], env_kwargs: Mapping[str, Any]) -> None:
    """Fail unless every env plays a counterfactual twin on ``reset(options={"twin": True})`` (grpo.twin_groups)."""
    from trace_envs.twins import envs_without_twins

    missing = envs_without_twins(env_ids, env_kwargs)
    if missing:
        raise ValueError(f"grpo.twin_groups is set but {missing[0]!r} has no counterfactual twin on "
                         f"reset(options={{'twin': True}}) (see trace_envs.twins; set grpo.twin_groups=false)")


def check_output_dir(output_dir: str | Path, adapter: str, resume: bool) -> None:
    """Refuse to overwrite an existing adapter or run directory unless resuming."""
    if resume:
        return
    root = Path(output_dir)
    if (root / "adapters" / adapter).exists():
        raise ValueError(
            f"adapter name clash: {root / 'adapters' / adapter} already exists; pass resume=true to continue "
            f"that run or choose another adapter name / output_dir"
        )
    taken = [p for p in (root / "checkpoints", root / "metrics.jsonl") if p.exists()]
    if taken:
        raise ValueError(
            f"output_dir {root} already holds a training run ({taken[0].name}); use a fresh output_dir or resume=true"
        )
