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


def _body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """The decoder stack and the LM head of a (peft-wrapped) causal LM, or None when it has another shape."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    body, head = getattr(base, "model", None), getattr(base, "lm_head", None)
    if not isinstance(body, torch.nn.Module) or not isinstance(head, torch.nn.Linear):
        return None
    return body, head


def masked_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_logprobs`` evaluated only where ``loss_mask`` is set (0 elsewhere).

    The LM head, the log-softmax and the entropy run on the sampled positions only (~15 % of a
    multi-turn episode's tokens), not on every position of the padded batch; on masked positions the
    values equal ``token_logprobs``'s. Falls back to ``token_logprobs`` for models without a
    ``model``/``lm_head`` split.
    """
    parts = _body_and_head(model)
    if parts is None:
        return token_logprobs(model, input_ids, attention_mask, temperature, with_entropy)
    body, head = parts
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    select = loss_mask[:, 1:] > 0
    logits = head(hidden[:, :-1][select]).float() / temperature  # (N, V)
    lse = torch.logsumexp(logits, dim=-1)
    picked = torch.gather(logits, -1, input_ids[:, 1:][select].unsqueeze(-1)).squeeze(-1) - lse
    lp = hidden.new_zeros(select.shape, dtype=torch.float32).masked_scatter(select, picked)
    zeros = torch.zeros_like(lp[:, :1])
    lp = torch.cat([zeros, lp], dim=1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
            entropy = torch.cat([zeros, lp.new_zeros(select.shape).masked_scatter(select, ent)], dim=1)
    return lp, entropy
