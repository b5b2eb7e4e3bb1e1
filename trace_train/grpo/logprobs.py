"""Per-token log-probs of given token sequences under a causal LM (padded, micro-batched)."""

from __future__ import annotations

from typing import Sequence

import torch


def pad_batch(
    token_ids: Sequence[Sequence[int]], masks: Sequence[Sequence[float]], pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence: ``(input_ids, attention_mask, loss_mask)``, each ``(B, L)``."""
    length = max(len(t) for t in token_ids)
    ids = torch.full((len(token_ids), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(token_ids), length), dtype=torch.long)
    loss_mask = torch.zeros((len(token_ids), length), dtype=torch.float32)
    for i, (t, m) in enumerate(zip(token_ids, masks)):
        if len(t) != len(m):
            raise ValueError(f"sequence {i}: {len(t)} token ids but {len(m)} mask entries")
        ids[i, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
        attn[i, : len(t)] = 1
        loss_mask[i, : len(m)] = torch.as_tensor(list(m), dtype=torch.float32)
    loss_mask[:, 0] = 0.0  # the first token has no context to be predicted from
    return ids, attn, loss_mask


def pad_values(values: Sequence[Sequence[float]], length: int) -> torch.Tensor:
    out = torch.zeros((len(values), length), dtype=torch.float32)
    for i, v in enumerate(values):
        out[i, : len(v)] = torch.as_tensor(list(v), dtype=torch.float32)
    return out


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log π(x_t | x_<t)`` aligned with ``input_ids`` (position 0 gets 0), and optionally the entropy.

    Logits are divided by ``temperature`` first, matching what the sampler drew from.
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1].float()
    logits = logits / temperature
    targets = input_ids[:, 1:]
    lse = torch.logsumexp(logits, dim=-1)
    lp = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - lse
    zeros = torch.zeros_like(lp[:, :1])
    lp = torch.cat([zeros, lp], dim=1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            ent = lse - (probs * logits).sum(-1)
            entropy = torch.cat([zeros.detach(), ent], dim=1)
    return lp, entropy
