"""The policy update of one iteration: micro-batched log-probs, the GRPO (or SFT) loss, AdamW steps.

``packing`` (``grpo.packing``) decides how a micro-batch reaches the model: ``none`` right-pads it to its
longest sequence under a padding mask; ``bucketed`` cuts micro-batches from the mini-batch sorted by
length and drops the padding mask (right padding under causal attention: no real token sees a pad);
``packed`` concatenates each micro-batch into one row with per-sequence attention
(``trace_train.grpo.packing``). All three give the same per-token log-probs and gradients up to float
rounding; the micro-batch composition (which samples share a forward) is the only other difference.
"""

from __future__ import annotations

import math
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from trace_train.grpo import dist
from trace_train.grpo.config import GRPOConfig
from trace_train.grpo.logprobs import (
    masked_token_logprobs,
    packed_token_logprobs,
    pad_batch,
    pad_values,
    token_logprobs,
)
from trace_train.grpo.loss import grpo_loss, sft_loss
from trace_train.grpo.packing import PACKING_MODES, bucket_order
from trace_train.grpo.seeds import shuffle_generator, update_seed


@dataclass
class Sample:
    """One training sequence: the episode's token ids, its loss mask and its advantage."""

    token_ids: list[int]
    loss_mask: list[float]
    advantage: float = 0.0
    sampler_logprobs: list[float] | None = None

    @property
    def n_tokens(self) -> int:
        return int(sum(self.loss_mask[1:]))  # position 0 is never predicted


def _chunks(seq: Sequence[int], size: int) -> list[list[int]]:
    return [list(seq[i : i + size]) for i in range(0, len(seq), size)]


def _check_packing(packing: str) -> None:
    if packing not in PACKING_MODES:
        raise ValueError(f"unknown packing {packing!r}; use one of {PACKING_MODES}")


def _micro_batches(samples: Sequence[Sample], indices: Sequence[int], micro: int, packing: str) -> list[list[int]]:
    if packing == "bucketed":
        indices = bucket_order([len(s.token_ids) for s in samples], indices)
    return _chunks(indices, micro)


def micro_batch_logprobs(
    model: torch.nn.Module,
    batch: Sequence[Sample],
    temperature: float,
    packing: str = "none",
    with_entropy: bool = False,
    pad_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(logprobs, entropy, loss_mask)`` of one micro-batch, each ``(B, L)`` padded to its longest sample.

    Log-probs are computed on the loss-mask positions (0 elsewhere) through the ``packing`` path."""
    _check_packing(packing)
    device = next(model.parameters()).device
    ids, attn, mask = pad_batch([s.token_ids for s in batch], [s.loss_mask for s in batch], pad_id)
    mask = mask.to(device)
    if packing == "packed":
        lp, ent = packed_token_logprobs(model, [s.token_ids for s in batch], mask, temperature, with_entropy)
    else:
        attention = attn.to(device) if packing == "none" else None
        lp, ent = masked_token_logprobs(model, ids.to(device), attention, mask, temperature, with_entropy=with_entropy)
    return lp, ent, mask


@torch.no_grad()
def sequence_logprobs(
    model: torch.nn.Module, samples: Sequence[Sample], micro: int, temperature: float, pad_id: int = 0,
    packing: str = "none",
) -> list[torch.Tensor]:
    """Log-probs (1-D, one per sample, aligned with its token ids) under ``model`` as it is now.

    ``packing="none"`` gives every position; ``bucketed``/``packed`` only the loss-mask positions (0
    elsewhere, which is all the loss reads)."""
    _check_packing(packing)
    device = next(model.parameters()).device
    out: dict[int, torch.Tensor] = {}
    for idx in _micro_batches(samples, range(len(samples)), micro, packing):
        batch = [samples[i] for i in idx]
        if packing == "none":
            ids, attn, _ = pad_batch([s.token_ids for s in batch], [s.loss_mask for s in batch], pad_id)
            lp, _ = token_logprobs(model, ids.to(device), attn.to(device), temperature)
        else:
            lp, _, _ = micro_batch_logprobs(model, batch, temperature, packing, pad_id=pad_id)
        out.update((i, lp[j, : len(s.token_ids)].cpu()) for j, (i, s) in enumerate(zip(idx, batch)))
    return [out[i] for i in range(len(samples))]


def _stack(values: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    return pad_values([v.tolist() for v in values], length)


@contextmanager
def seeded_torch_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Run the block on torch RNGs (CPU, and ``device``'s when it is a GPU) seeded with ``seed``; the process's
    own RNG states are restored after it."""
    gpu = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if gpu else []):
        torch.random.default_generator.manual_seed(seed)
        if gpu:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


def optimize(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    samples: list[Sample],
    cfg: GRPOConfig,
    iteration: int,
    old_lps: list[torch.Tensor] | None,
    ref_lps: list[torch.Tensor] | None,
    pad_id: int = 0,
    denominator_scale: float = 1.0,
) -> dict[str, float]:
    """Run ``ppo_epochs × mini_batches`` optimizer steps on this rank's ``samples``.

    Each rank's loss is divided by the *global* normalizer (tokens or sequences summed over ranks)
    and gradients are summed over ranks, so N ranks give the same step as one rank on all samples.
    ``old_lps=None`` means "old = current policy before the step" (exact when there is one step).
    ``denominator_scale`` multiplies every mini-batch's normalizer (``trace_train.grpo.loss.denominator_scale``).
    Whatever the update draws (LoRA dropout masks) comes from ``seeds.update_seed(cfg.seed, iteration, rank)``.
    """
    _check_packing(cfg.packing)
    device = next(model.parameters()).device
    with seeded_torch_rng(update_seed(cfg.seed, iteration, dist.rank()), device):
        return _optimize(model, optimizer, params, samples, cfg, iteration, old_lps, ref_lps, pad_id, device,
                         denominator_scale)


def _optimize(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    samples: list[Sample],
    cfg: GRPOConfig,
    iteration: int,
    old_lps: list[torch.Tensor] | None,
    ref_lps: list[torch.Tensor] | None,
    pad_id: int,
    device: torch.device,
    denominator_scale: float,
) -> dict[str, float]:
    sums: dict[str, float] = defaultdict(float)
    weights: dict[str, float] = defaultdict(float)
    grad_norms: list[float] = []
    model.train()
    token_level = cfg.mode == "sft" or cfg.loss_level == "token"
    for epoch in range(cfg.ppo_epochs):
        order = np.arange(len(samples))
        if cfg.mini_batches > 1:
            order = shuffle_generator(cfg.seed, iteration, epoch, dist.rank()).permutation(len(samples))
        for mini in np.array_split(order, cfg.mini_batches):
            mini = [int(i) for i in mini]
            local = sum(samples[i].n_tokens for i in mini) if token_level else len(mini)
            normalizer = dist.all_reduce_sum(local)
            if normalizer == 0:
                continue
            normalizer *= denominator_scale  # exact at 1.0: the default step is unchanged bit for bit
            optimizer.zero_grad(set_to_none=True)
            for idx in _micro_batches(samples, mini, cfg.micro_batch_size, cfg.packing):
                batch = [samples[i] for i in idx]
                lp, ent, mask = micro_batch_logprobs(model, batch, cfg.temperature, cfg.packing, True, pad_id)
                length = mask.shape[1]
                if cfg.mode == "sft":
                    out = sft_loss(lp, mask, normalizer=normalizer)
                else:
                    old = lp.detach() if old_lps is None else _stack([old_lps[i] for i in idx], length).to(device)
                    ref = None if ref_lps is None else _stack([ref_lps[i] for i in idx], length).to(device)
                    adv = torch.tensor([s.advantage for s in batch], dtype=torch.float32, device=device)
                    out = grpo_loss(
                        lp,
                        old,
                        adv,
                        mask,
                        eps_low=cfg.eps,
                        eps_high=cfg.eps_high,
                        level=cfg.loss_level,
                        ref_logprobs=ref,
                        kl_beta=cfg.kl_beta,
                        entropy=ent,
                        normalizer=normalizer,
                    )
                out.loss.backward()
                sums["loss"] += float(out.loss.detach())
                for key, value in out.metrics.items():
                    sums[key] += value * out.tokens
                    weights[key] += out.tokens
            dist.all_reduce_grads(params)
            max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    gathered = dist.all_gather_objects((dict(sums), dict(weights)))
    metrics: dict[str, float] = {}
    for key in {k for s, _ in gathered for k in s}:
        total = sum(s.get(key, 0.0) for s, _ in gathered)
        weight = sum(w.get(key, 0.0) for _, w in gathered)
        if key == "loss":  # per-rank losses are globally normalized: their sum is the step's loss
            metrics[key] = total / max(len(grad_norms), 1)
        elif weight > 0:
            metrics[key] = total / weight
    metrics["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    metrics["optimizer_steps"] = len(grad_norms)
    return metrics
