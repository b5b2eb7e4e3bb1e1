"""Per-position gate labels (``moe.train.labels``): ``assistant``, ``all_tokens`` and ``likelihood``.

``assistant`` (the default, the paper's) leaves each example's slot on its assistant tokens. ``all_tokens`` puts it
on every position, system, user and tool turns included: the gates route those at inference too, and an adapter
acts through their keys and values. ``likelihood`` labels each position by what its routing changes: the gate at
position t decides the output that predicts token t + 1, so t gets the example's slot when that slot's adapter
(forced on the whole sequence) gives the policy's token t + 1 at least ``margin`` nats more log-probability than
the base, and slot 0 (the base) otherwise; positions whose next token is not the policy's are not labelled. On the
shipped 2-layer base that credit is too local (an adapter routed at its decision token alone keeps 18-28 % of its
gain) and the gates collapse onto the base; it is kept as an ablation (README, "What the gates learn on").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import torch

from trace_moe.composed import ComposedModel
from trace_moe.examples import GateExample, collate, iter_batches

logger = logging.getLogger(__name__)

LABEL_KINDS = ("assistant", "all_tokens", "likelihood")


@torch.no_grad()
def next_token_logprobs(composed: ComposedModel, examples: Sequence[GateExample], slot: int | Sequence[int],
                        batch_size: int = 4, pad_id: int = 0, max_len: int | None = None) -> list[torch.Tensor]:
    """Per example, ``log p(token t + 1 | ..t)`` at every position t < T - 1 with routing forced to ``slot``
    (one slot for all, or one per example)."""
    slots = [int(slot)] * len(examples) if isinstance(slot, int) else [int(s) for s in slot]
    device = next(composed.gates.parameters()).device
    out: list[torch.Tensor] = []
    for start, chunk in enumerate(iter_batches(examples, batch_size, range(len(examples)))):
        b = collate(chunk, pad_id, max_len)
        ids, att = b.input_ids.to(device), b.attention_mask.to(device)
        forced = torch.tensor(slots[start * batch_size:start * batch_size + len(chunk)], device=device)
        with composed.forcing(forced):
            logits = composed(input_ids=ids, attention_mask=att, use_cache=False).logits
        logp = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        for row in range(len(chunk)):
            out.append(logp[row, : int(att[row].sum()) - 1].cpu())
    return out


def likelihood_token_labels(composed: ComposedModel, examples: Sequence[GateExample], margin: float,
                            batch_size: int = 4, pad_id: int = 0, max_len: int | None = None
                            ) -> list[GateExample]:
    """``examples`` with ``token_labels`` set (module docstring); an example labelled with the base keeps the base
    on all its assistant positions."""
    if margin < 0:
        raise ValueError(f"likelihood labels: margin must be >= 0 nats, got {margin}")
    base = next_token_logprobs(composed, examples, 0, batch_size, pad_id, max_len)
    own = next_token_logprobs(composed, examples, [e.label for e in examples], batch_size, pad_id, max_len)
    labelled: list[GateExample] = []
    adapter_positions = policy_positions = 0
    for example, lp_base, lp_own in zip(examples, base, own):
        length = lp_base.shape[0] + 1
        mask = torch.tensor(example.loss_mask[:length])
        labels = torch.full((len(example.input_ids),), -1, dtype=torch.long)
        policy_next = mask[1:].bool()
        wins = (lp_own - lp_base) >= margin
        step = torch.where(wins & (example.label > 0), example.label, 0)
        labels[: length - 1] = torch.where(policy_next, step, -1)
        adapter_positions += int((labels > 0).sum())
        policy_positions += int(policy_next.sum())
        labelled.append(replace(example, token_labels=labels.tolist()))
    logger.info("likelihood gate labels (margin %.2f nats): %d of %d policy positions go to an adapter",
                margin, adapter_positions, policy_positions)
    return labelled


def all_token_labels(examples: Sequence[GateExample]) -> list[GateExample]:
    """``examples`` with their slot on every position (system, user and tool tokens too)."""
    return [replace(e, token_labels=[e.label] * len(e.input_ids)) for e in examples]


def label_examples(composed: ComposedModel, examples: Sequence[GateExample], kind: str, margin: float,
                   batch_size: int = 4, pad_id: int = 0, max_len: int | None = None) -> list[GateExample]:
    """The gate examples as ``moe.train.labels`` asks: ``assistant`` unchanged, ``all_tokens`` the example's slot on
    every position, ``likelihood`` per token."""
    if kind == "assistant":
        return list(examples)
    if kind == "all_tokens":
        return all_token_labels(examples)
    if kind == "likelihood":
        return likelihood_token_labels(composed, examples, margin, batch_size, pad_id, max_len)
    raise ValueError(f"gate labels must be one of {LABEL_KINDS}, got {kind!r}")
