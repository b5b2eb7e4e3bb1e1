"""One batched generation turn over many token prompts with a KV cache (left padding).

``generate_turn`` runs one prefill over all prompts (left-padded, attention mask, explicit position
ids) and then decodes token by token with the cache; rows stop at a stop token or at their own token
budget, and finished rows are dropped from the cache so they cost nothing.

Two ways the prefill avoids work:

* identical prompts (the members of a group on their first turn) are encoded once and their cache
  copied to every member; the prefix all prompts share (system prompt) is encoded once as well;
* with ``caches`` (one ``RowCache`` per row, or ``None``), a row's cache from its previous turn is
  continued: only the tokens after it (the last sampled token, the env's observation) are encoded,
  and the row's cache is handed back in ``TurnOutput.cache`` for the next turn.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from trace_train.rollout.base import SamplingParams
from trace_train.rollout.kv_cache import RowCache, cached_prefill_cache, extract_row, make_cache
from trace_train.rollout.sampling import sample_tokens


@dataclass
class TurnOutput:
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False  # ended on a stop token (else: budget exhausted)
    cache: RowCache | None = None  # the row's KV after the turn (covers prompt + ids[:-1]); with ``caches`` only


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers >= 5.24 calls the KV cache ``cache``; older versions ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _out_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    first, k = prompts[0], 0
    limit = min(len(p) for p in prompts) - 1  # every row keeps >= 1 own token (its logits)
    while k < limit and all(p[k] == first[k] for p in prompts):
        k += 1
    return max(k, 0)


def _suffix_batch(suffixes: Sequence[Sequence[int]], starts: torch.Tensor, pad_id: int) -> tuple:
    """Left-padded ``(input_ids, own_mask, positions)`` of the suffixes; row i continues at ``starts[i]``."""
    n, width = len(suffixes), max(len(s) for s in suffixes)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    own = torch.zeros((n, width), dtype=torch.long)
    for i, suffix in enumerate(suffixes):
        if suffix:
            input_ids[i, width - len(suffix):] = torch.tensor(list(suffix), dtype=torch.long)
            own[i, width - len(suffix):] = 1
    positions = torch.maximum(starts[:, None] + own.cumsum(-1) - 1, starts[:, None])
    return input_ids, own, positions


def _prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], cache_kw: str, device, pad_id: int,
             capacity: int = 0) -> tuple:
    """Prefill all prompts; the prefix they share (system prompt, tools, a group's first turn) runs once.

    The shared prefix is encoded with batch size 1 and its KV cache broadcast to every row; each row's
    own suffix follows, left-padded, so padding sits between prefix and suffix (masked out, with
    positions that continue the prefix).
    """
    n = len(prompts)
    shared = _common_prefix(prompts) if n > 1 else 0
    cache = make_cache(capacity)
    kwargs: dict[str, Any] = {cache_kw: cache} if cache is not None else {}
    if shared:
        prefix = torch.tensor([list(prompts[0][:shared])], dtype=torch.long, device=device)
        out = model(input_ids=prefix, attention_mask=torch.ones_like(prefix),
                    position_ids=torch.arange(shared, device=device)[None], use_cache=True, logits_to_keep=1,
                    **kwargs)
        cache = _out_cache(out)
        cache.batch_select_indices(torch.zeros(n, dtype=torch.long, device=device))
        kwargs[cache_kw] = cache
    input_ids, own, positions = _suffix_batch([p[shared:] for p in prompts], torch.full((n,), shared), pad_id)
    attention = torch.cat([torch.ones((n, shared), dtype=torch.long), own], dim=-1)
    input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                logits_to_keep=1, **kwargs)
    return _out_cache(out), out.logits[:, -1, :], attention, positions[:, -1] + 1


def _prefill_unique(model: torch.nn.Module, prompts: Sequence[Sequence[int]], cache_kw: str, device, pad_id: int,
                    capacity: int = 0) -> tuple:
    """``_prefill`` of the distinct prompts only; rows with the same prompt get copies of its cache."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompts]
    if len(index) == len(prompts):
        return _prefill(model, prompts, cache_kw, device, pad_id, capacity)
    past, logits, attention, next_pos = _prefill(model, [list(p) for p in index], cache_kw, device, pad_id, capacity)
    select = torch.tensor(rows, dtype=torch.long, device=device)
    past.batch_select_indices(select)
    return past, logits[select], attention[select], next_pos[select]


_CALL_COST_TOKENS = 256  # fixed cost of one forward call, in padded tokens (Python + kernel launches)


def _length_buckets(lengths: Sequence[int], call_cost: int = _CALL_COST_TOKENS) -> list[list[int]]:
    """Rows grouped by length so that padding + per-call cost is minimal (exact DP over the sorted rows):
    a bucket of ``n`` rows padded to width ``w`` costs ``call_cost + n * w``."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    best = [0.0] + [float("inf")] * len(order)
    cut = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        width = lengths[order[end - 1]]
        for start in range(end):
            cost = best[start] + call_cost + (end - start) * width
            if cost < best[end]:
                best[end], cut[end] = cost, start
    buckets, end = [], len(order)
    while end > 0:
        buckets.append(order[cut[end]:end])
        end = cut[end]
    return buckets[::-1]


def _prefill_rows(model: torch.nn.Module, suffixes: Sequence[Sequence[int]], caches: Sequence[RowCache | None],
                  cache_kw: str, device, pad_id: int, capacity: int) -> tuple:
    if all(c is None for c in caches):  # nothing to continue (a bucket of rows without a cache): a fresh prefill
        return _prefill(model, suffixes, cache_kw, device, pad_id, capacity)
    lengths = [c.length if c is not None else 0 for c in caches]
    past, prefix_att = cached_prefill_cache(caches, capacity)
    input_ids, own, positions = _suffix_batch(suffixes, torch.tensor(lengths, dtype=torch.long), pad_id)
    attention = torch.cat([prefix_att, own], dim=-1)
    input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                logits_to_keep=1, **{cache_kw: past})
    return _out_cache(out), out.logits[:, -1, :], attention, positions[:, -1] + 1


def _prefill_cached(model: torch.nn.Module, prompts: Sequence[Sequence[int]], caches: Sequence[RowCache | None],
                    cache_kw: str, device, pad_id: int, budget: int) -> tuple:
    """Continue each row's cache: encode only ``prompt[cache.length:]`` (rows without a cache: all of it).

    Observations differ in length from member to member, so the suffixes are encoded in buckets of
    similar length (``_length_buckets``) and the rows' caches then laid out as one decode batch."""
    lengths = [c.length if c is not None else 0 for c in caches]
    for i, (p, c) in enumerate(zip(prompts, lengths)):
        if c >= len(p):
            raise ValueError(f"row {i}: its cache covers {c} tokens but the prompt has only {len(p)}")
    suffixes = [p[c:] for p, c in zip(prompts, lengths)]
    capacity = max(len(p) for p in prompts) + max(len(s) for s in suffixes) + budget
    buckets = _length_buckets([len(s) for s in suffixes])
    if len(buckets) == 1:
        return _prefill_rows(model, suffixes, caches, cache_kw, device, pad_id, capacity)
    n = len(prompts)
    row_caches: list[RowCache | None] = [None] * n
    logits: list[torch.Tensor | None] = [None] * n
    for bucket in buckets:
        past, lg, attention, _ = _prefill_rows(model, [suffixes[i] for i in bucket], [caches[i] for i in bucket],
                                               cache_kw, device, pad_id, 0)
        for r, i in enumerate(bucket):
            row_caches[i] = extract_row(past, attention, r)
            logits[i] = lg[r]
    if any(c is None for c in row_caches):  # not our cache type: one padded batch after all
        return _prefill_rows(model, suffixes, caches, cache_kw, device, pad_id, capacity)
    past, attention = cached_prefill_cache(row_caches, capacity)
    next_pos = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    return past, torch.stack(logits), attention.to(device), next_pos.to(device)


@torch.no_grad()
def generate_turn(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    budgets: Sequence[int],
    sampling: SamplingParams,
    generators: Sequence[torch.Generator],
    stop_ids: set[int],
    pad_id: int,
    device: str | torch.device = "cpu",
    caches: Sequence[RowCache | None] | None = None,
) -> list[TurnOutput]:
    """Sample one completion per prompt (each at most ``budgets[i]`` tokens) in one batched loop.

    ``caches``: continue these per-row caches (see module docstring) and return each row's cache."""
    n = len(prompts)
    outs = [TurnOutput() for _ in range(n)]
    rows = [i for i in range(n) if budgets[i] > 0]  # batch row r belongs to episode rows[r]
    if not rows:
        return outs
    if caches is not None and len(caches) != n:
        raise ValueError(f"{len(caches)} caches for {n} prompts")
    keep = caches is not None
    cache_kw = _cache_kwarg(model)
    budget = max(budgets[i] for i in rows)  # the cache is allocated once for the whole turn
    prompts_ = [prompts[i] for i in rows]
    if keep and any(caches[i] is not None for i in rows):
        past, logits, attention, next_pos = _prefill_cached(model, prompts_, [caches[i] for i in rows], cache_kw,
                                                            device, pad_id, budget)
    else:
        past, logits, attention, next_pos = _prefill_unique(model, prompts_, cache_kw, device, pad_id,
                                                            max(len(p) for p in prompts_) + budget)
    while rows:
        tokens, logprobs = sample_tokens(logits, sampling, [generators[i] for i in rows])
        tok_list, lp_list = tokens.tolist(), logprobs.tolist()
        alive: list[int] = []
        for r, i in enumerate(rows):
            out = outs[i]
            out.ids.append(tok_list[r])
            out.logprobs.append(lp_list[r])
            if tok_list[r] in stop_ids:
                out.stopped = True
            elif len(out.ids) < budgets[i]:
                alive.append(r)
                continue
            if keep:
                out.cache = extract_row(past, attention, r)
        if not alive:
            break
        if len(alive) < len(rows):
            select = torch.tensor(alive, dtype=torch.long, device=device)
            past.batch_select_indices(select)
            tokens, attention, next_pos = tokens[select], attention[select], next_pos[select]
            rows = [rows[r] for r in alive]
        attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
        out_ = model(input_ids=tokens[:, None].to(device), attention_mask=attention,
                     position_ids=next_pos[:, None], use_cache=True, **{cache_kw: past})
        past = _out_cache(out_)
        logits = out_.logits[:, -1, :]
        next_pos = next_pos + 1
    return outs
