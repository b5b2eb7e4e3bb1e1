"""The GRPO loss, in one place: PPO-clip on masked tokens, optional KL to a reference (k3).

Pure functions over tensors shaped ``(B, T)`` (log-probs of the tokens actually in the sequence,
aligned with a 0/1 ``mask`` that is 1 only on sampled tokens) and advantages shaped ``(B,)``.

Aggregation levels (``level``):

* ``"token"`` (default, DAPO/"bnpo"): per-token ratio, loss summed over all masked tokens of the
  batch and divided by their number (or by ``normalizer`` when micro-batching a larger batch).
* ``"token_seq_mean"`` (the paper's formula): per-token ratio, mean over each sequence's tokens,
  then mean over sequences.
* ``"sequence"`` (GSPO-style): one ratio per sequence, the geometric mean of its token ratios
  ``exp(mean_t(log π_new − log π_old))``, clipped per sequence, mean over sequences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

LossLevel = Literal["token", "token_seq_mean", "sequence"]
LEVELS = ("token", "token_seq_mean", "sequence")
LOSS_DENOMINATORS = ("informative", "sampled")


def denominator_scale(mode: str, kept: float, sampled: float) -> float:
    """The factor on every mini-batch's loss denominator (``GRPOConfig.loss_denominator``).

    ``kept`` and ``sampled`` count the same unit (tokens at the token level, sequences otherwise) over the samples the
    update trains on and over every record the iteration sampled. ``"informative"``: 1 (the loss is a mean over the
    samples with signal). ``"sampled"``: ``sampled / kept``, so the iteration's loss is a mean over every sampled
    token, the records of constant-reward groups counting with advantage 0 as in TRL's GRPOTrainer, without running
    them through the model."""
    if mode not in LOSS_DENOMINATORS:
        raise ValueError(f"loss_denominator must be one of {LOSS_DENOMINATORS}, got {mode!r}")
    if mode == "informative" or kept <= 0:
        return 1.0
    if sampled < kept:
        raise ValueError(f"{sampled} sampled units cannot be fewer than the {kept} kept ones")
    return sampled / kept


# exp() of a log-ratio past ~88 overflows float32: the loss turns inf and 0 * inf makes the gradient NaN even on
# the clipped branch. Clamped at ±20 nats, a token the policy moved that far since sampling adds a bounded loss
# and no gradient; every ratio inside e^±20 is computed exactly as before.
MAX_LOG_RATIO = 20.0


@dataclass
class LossOutput:
    """The differentiable loss and detached metrics (means over the masked tokens of this batch)."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    sequences: int = 0


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position: ``(..., V) -> (...)``."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(π ‖ π_ref): ``exp(ref − lp) − (ref − lp) − 1`` (≥ 0)."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    total = mask.sum()
    return float((x * mask).sum() / total.clamp(min=1.0))


def grpo_loss(
    logprobs_new: torch.Tensor,
    logprobs_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    level: LossLevel = "token",
    ref_logprobs: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    logits: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> LossOutput:
    """PPO-clip GRPO loss with ratio bounds ``[1 − eps_low, 1 + eps_high]`` (``eps_high`` defaults to ``eps_low``).

    ``normalizer`` overrides the denominator (tokens for ``"token"``, sequences otherwise) so that
    micro-batches of one mini-batch sum to the mini-batch loss. ``ref_logprobs`` with ``kl_beta > 0``
    adds ``β·k3`` per token. ``entropy`` (per token) or ``logits`` (``(B, T, V)``) add an entropy metric.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown loss level {level!r}; use one of {LEVELS}")
    if logprobs_new.shape != logprobs_old.shape or logprobs_new.shape != mask.shape:
        raise ValueError(
            f"shape mismatch: new {tuple(logprobs_new.shape)}, old {tuple(logprobs_old.shape)}, "
            f"mask {tuple(mask.shape)}"
        )
    if kl_beta > 0 and ref_logprobs is None:
        raise ValueError("kl_beta > 0 needs ref_logprobs")
    eps_high = eps_low if eps_high is None else eps_high
    mask = mask.to(logprobs_new.dtype)
    adv = advantages.to(logprobs_new.dtype).reshape(-1, 1)
    old = logprobs_old.detach()
    log_ratio = (logprobs_new - old) * mask  # zero off-mask keeps exp() finite on padding
    seq_tokens = mask.sum(-1)

    if level == "sequence":
        seq_log_ratio = log_ratio.sum(-1, keepdim=True) / seq_tokens.clamp(min=1.0).unsqueeze(-1)
        ratio = torch.exp(seq_log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # (B, 1)
    else:
        ratio = torch.exp(log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # (B, T)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_term = -torch.min(ratio * adv, clipped * adv)
    is_clipped = ((ratio < 1.0 - eps_low) & (adv < 0)) | ((ratio > 1.0 + eps_high) & (adv > 0))
    per_token = per_term.expand_as(mask) if level == "sequence" else per_term

    kl = None
    if ref_logprobs is not None:
        kl = k3_kl(logprobs_new, ref_logprobs.detach())
        if kl_beta > 0:
            per_token = per_token + kl_beta * kl

    n_seq = mask.shape[0]
    if level == "token":
        denom = float(mask.sum().clamp(min=1.0)) if normalizer is None else float(normalizer)
        loss = (per_token * mask).sum() / denom
    else:
        seq_loss = (per_token * mask).sum(-1) / seq_tokens.clamp(min=1.0)
        denom = float(max(n_seq, 1)) if normalizer is None else float(normalizer)
        loss = seq_loss.sum() / denom

    with torch.no_grad():
        metrics: dict[str, float] = {}
        if level == "sequence":
            has_tokens = (seq_tokens > 0).to(mask.dtype)
            metrics["clip_fraction"] = float(
                (is_clipped.squeeze(-1).to(mask.dtype) * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
            )
        else:
            metrics["clip_fraction"] = _masked_mean(is_clipped.to(mask.dtype), mask)
        # k3 estimate of KL(π_old ‖ π_new) on the sampled tokens
        metrics["approx_kl"] = _masked_mean(k3_kl(old, logprobs_new.detach()), mask)
        metrics["ratio_mean"] = _masked_mean(torch.exp(log_ratio.detach()), mask)
        if kl is not None:
            metrics["ref_kl"] = _masked_mean(kl.detach(), mask)
        if entropy is None and logits is not None:
            entropy = token_entropy(logits.detach())
        if entropy is not None:
            metrics["entropy"] = _masked_mean(entropy.detach().to(mask.dtype), mask)
    return LossOutput(loss=loss, metrics=metrics, tokens=int(mask.sum()), sequences=n_seq)


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, normalizer: float | None = None) -> LossOutput:
    """Cross-entropy on the masked tokens: ``−Σ mask·log π / normalizer`` (default: masked token count)."""
    mask = mask.to(logprobs.dtype)
    denom = float(mask.sum().clamp(min=1.0)) if normalizer is None else float(normalizer)
    loss = -(logprobs * mask).sum() / denom
    return LossOutput(
        loss=loss,
        metrics={"nll": _masked_mean(-logprobs.detach(), mask)},
        tokens=int(mask.sum()),
        sequences=mask.shape[0],
    )
