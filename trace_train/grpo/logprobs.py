"""Per-token log-probs of given token sequences under a causal LM (padded or packed, micro-batched)."""

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
    attention_mask: torch.Tensor | None,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log π(x_t | x_<t)`` aligned with ``input_ids`` (position 0 gets 0), and optionally the entropy.

    Logits are divided by ``temperature`` first, matching what the sampler drew from. A right-padded
    batch may pass ``attention_mask=None``: under causal attention no real token sees a pad.
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
    attention_mask: torch.Tensor | None,
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


def _picked(
    logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    lse = torch.logsumexp(logits, dim=-1)
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - lse
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return picked, ent


def packed_token_logprobs(
    model: torch.nn.Module,
    token_ids: Sequence[Sequence[int]],
    loss_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``masked_token_logprobs`` of ``token_ids`` run as ONE packed row, returned padded ``(B, L)``.

    The sequences are concatenated without padding, position ids restart at 0 for each, and
    attention stays inside each sequence (``trace_train.grpo.packing.packed_attention``); values are
    set where ``loss_mask`` (``(B, L)``, as ``pad_batch`` returns it) is set, 0 elsewhere.
    """
    from trace_train.grpo.packing import packed_attention, packed_row

    lengths = [len(t) for t in token_ids]
    if loss_mask.shape[0] != len(lengths) or loss_mask.shape[1] < max(lengths):
        raise ValueError(f"loss mask {tuple(loss_mask.shape)} does not cover sequences of lengths {lengths}")
    device = loss_mask.device
    flat, positions = packed_row(token_ids, device)
    offsets = torch.as_tensor([0, *lengths[:-1]], device=device).cumsum(0)
    select = loss_mask > 0
    select[:, 0] = False  # position 0 has no context inside its sequence
    rows, cols = select.nonzero(as_tuple=True)  # row-major: the order masked_token_logprobs uses
    source = offsets[rows] + cols - 1  # the packed position whose output predicts token (row, col)
    targets = flat[0, source + 1]
    parts = _body_and_head(model)
    with packed_attention(model, lengths):
        if parts is None:
            logits = model(input_ids=flat, position_ids=positions, use_cache=False).logits[0, source]
        else:
            body, head = parts
            hidden = body(input_ids=flat, position_ids=positions, use_cache=False).last_hidden_state
            logits = head(hidden[0, source])
    picked, ent = _picked(logits.float() / temperature, targets, with_entropy)
    lp = torch.zeros(select.shape, dtype=torch.float32, device=device).index_put((rows, cols), picked)
    entropy = None
    if ent is not None:
        entropy = torch.zeros(select.shape, dtype=torch.float32, device=device).index_put((rows, cols), ent)
    return lp, entropy
