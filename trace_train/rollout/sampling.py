"""Per-row seeded token sampling for batched generation.

Every row has its own ``torch.Generator`` and draws exactly one uniform number per sampled token, so
a member's tokens depend only on its own seed and its own logits, never on which other episodes
share the batch. An episode's sampler is seeded by :func:`episode_sampler_seed` from its env seed *and* its
member's ``sample_seed``: the sample seed alone repeats across env seeds (a plain rollout plays every seed
with sample seed 0, calibration member m of every group with the same one), and episodes with one sampler
stream draw the same number at the same token position -- a decision sampled at p = 0.3 then goes the same
way in every episode instead of in 30 % of them. The recorded log-prob is that of the sampled token under
the temperature-scaled distribution ``log_softmax(logits / T)`` (``T = 1`` for greedy), before top-p truncation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from trace_train.rollout.base import SamplingParams

_MASK = 0xFFFF_FFFF_FFFF_FFFF
_TAG_EPISODE = 0x5A3E  # keeps these streams apart from other SeedSequence uses of the same numbers


def episode_sampler_seed(env_seed: int, sample_seed: int) -> int:
    """The seed of one episode's sampler (64 bits), from its env seed and its member's sample seed: episodes
    that differ in either draw independent streams; the same pair always draws the same one."""
    entropy = [int(env_seed) & _MASK, int(sample_seed) & _MASK, _TAG_EPISODE]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0])


def make_generator(seed: int) -> torch.Generator:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
    return gen


def sample_tokens(
    logits: torch.Tensor, sampling: SamplingParams, generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of ``logits`` (B, V); returns ``(tokens (B,), logprobs (B,))``."""
    logits = logits.float()
    greedy = sampling.greedy or sampling.temperature <= 0.0
    temperature = 1.0 if greedy else float(sampling.temperature)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if greedy:
        tokens = torch.argmax(logp, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    if len(generators) != logits.shape[0]:
        raise ValueError(f"{len(generators)} generators for {logits.shape[0]} rows")
    probs = logp.exp()
    uniforms = torch.stack([torch.rand((), generator=g) for g in generators]).to(probs.device)
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        cum = sorted_probs.cumsum(-1)
        keep = (cum - sorted_probs) < sampling.top_p
        keep[..., 0] = True  # the most likely token always stays (top_p = 0 would otherwise keep none)
        sorted_probs = sorted_probs * keep
        cdf = sorted_probs.cumsum(-1)
        idx = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True).clamp(max=cdf.shape[-1] - 1)
        tokens = order.gather(-1, idx).squeeze(-1)
    else:
        cdf = probs.cumsum(-1)
        idx = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)
        tokens = idx.clamp(max=cdf.shape[-1] - 1).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
