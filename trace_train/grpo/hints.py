"""Hint injection (paper §3.5): hinted group members are trained as if they had seen the plain prompt.

A hinted member played with the env's guidance appended to its system prompt (the backend recorded
the unhinted prompt's ids in ``info['hint']``). Before the update the hinted prompt ids are replaced
by the unhinted ones; the sampled completion ids and every later token stay exactly as they were
(the chat template renders later turns independently of the system prompt's text).

What this does to the importance ratio. The completion was drawn from q = π_old(·| hinted prompt) but
the loss scores it under p = π(·| plain prompt). The trainer therefore recomputes the old log-probs of
hinted samples under the plain prompt (the sampler's log-probs belong to q and are dropped), so the
PPO ratio is π_θ(a | plain) / π_old(a | plain): it starts at exactly 1 and the usual clip [1 − ε,
1 + ε_high] bounds each step as for any on-policy sample. Had the sampler's hinted log-probs been used,
the ratio would start at p/q, far below 1 on the tokens the hint made likely, and the clip would zero
the gradient of exactly those tokens whenever their advantage is negative, and shrink it when positive.
The behaviour mismatch p/q itself is deliberately *not* corrected: weighting by it would give the
guided tokens almost no weight, which is the point of the hint. It is reported instead, as
``hint_logprob_shift`` (mean of log q − log p over the hinted members' sampled tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trace_envs.records import TrajectoryRecord


@dataclass(frozen=True)
class TrainingSequence:
    """The ids, loss mask and sampler log-probs the update sees for one record."""

    token_ids: list[int]
    loss_mask: list[float]
    sampler_logprobs: list[float] | None  # None when they do not belong to these ids (a hinted member)
    hinted: bool
    hinted_sampler_logprobs: list[float] | None = None  # the hinted member's own, aligned with token_ids


def is_hinted(record: TrajectoryRecord) -> bool:
    return bool(record.info and record.info.get("hint"))


def training_sequence(record: TrajectoryRecord) -> TrainingSequence:
    """The record's sequence with a hinted prompt swapped for the unhinted one (unhinted: unchanged)."""
    if record.token_ids is None or record.loss_mask is None:
        raise ValueError(f"record {record.episode_id} has no token_ids/loss_mask")
    ids, mask = list(record.token_ids), [float(x) for x in record.loss_mask]
    lps = None if record.logprobs is None else [float(x) for x in record.logprobs]
    if not is_hinted(record):
        return TrainingSequence(ids, mask, lps, hinted=False)
    hint: dict[str, Any] = record.info["hint"]
    n = int(hint["hinted_prompt_len"])
    plain = [int(t) for t in hint["unhinted_prompt_ids"]]
    if not 0 < n <= len(ids) or any(mask[:n]):
        raise ValueError(f"record {record.episode_id}: hinted prompt length {n} does not fit its token stream")
    shifted = None if lps is None else [0.0] * len(plain) + lps[n:]
    return TrainingSequence(plain + ids[n:], [0.0] * len(plain) + mask[n:], None, hinted=True,
                            hinted_sampler_logprobs=shifted)
