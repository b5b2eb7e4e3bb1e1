"""One batched generation turn over many token prompts with a KV cache (left padding).

``generate_turn`` runs one prefill over all prompts (left-padded, attention mask, explicit position
ids) and then decodes token by token with ``past_key_values``; rows stop at a stop token or at
their own token budget, and finished rows are dropped from the cache so they cost nothing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from trace_train.rollout.base import SamplingParams
from trace_train.rollout.kv_cache import make_cache
from trace_train.rollout.sampling import sample_tokens


@dataclass
class TurnOutput:
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False  # ended on a stop token (else: budget exhausted)


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


def _prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], cache_kw: str, device, pad_id: int) -> tuple:
    """Prefill all prompts; the prefix they share (system prompt, tools, a group's first turn) runs once.

    The shared prefix is encoded with batch size 1 and its KV cache broadcast to every row; each row's
    own suffix follows, left-padded, so padding sits between prefix and suffix (masked out, with
    positions that continue the prefix).
    """
    n = len(prompts)
    shared = _common_prefix(prompts) if n > 1 else 0
    cache = make_cache()
    kwargs: dict[str, Any] = {cache_kw: cache} if cache is not None else {}
    if shared:
        prefix = torch.tensor([list(prompts[0][:shared])], dtype=torch.long, device=device)
        out = model(input_ids=prefix, attention_mask=torch.ones_like(prefix),
                    position_ids=torch.arange(shared, device=device)[None], use_cache=True, logits_to_keep=1,
                    **kwargs)
        cache = _out_cache(out)
        cache.batch_select_indices(torch.zeros(n, dtype=torch.long, device=device))
        kwargs[cache_kw] = cache
    suffixes = [list(p[shared:]) for p in prompts]
    width = max(len(p) for p in suffixes)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    own = torch.zeros((n, width), dtype=torch.long)
    for i, suffix in enumerate(suffixes):
        if suffix:
            input_ids[i, width - len(suffix):] = torch.tensor(suffix, dtype=torch.long)
            own[i, width - len(suffix):] = 1
    positions = (shared + own.cumsum(-1) - 1).clamp(min=shared)
    attention = torch.cat([torch.ones((n, shared), dtype=torch.long), own], dim=-1)
    input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                logits_to_keep=1, **kwargs)
    return _out_cache(out), out.logits[:, -1, :], attention, positions[:, -1] + 1


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
) -> list[TurnOutput]:
    """Sample one completion per prompt (each at most ``budgets[i]`` tokens) in one batched loop."""
    n = len(prompts)
    outs = [TurnOutput() for _ in range(n)]
    if n == 0:
        return outs
    cache_kw = _cache_kwarg(model)
    past, logits, attention, next_pos = _prefill(model, prompts, cache_kw, device, pad_id)
    rows = [i for i in range(n) if budgets[i] > 0]  # batch row r belongs to episode rows[r]
    if len(rows) < n:
        keep = torch.tensor(rows, dtype=torch.long, device=device)
        past.batch_select_indices(keep)
        logits, attention, next_pos = logits[keep], attention[keep], next_pos[keep]
    while rows:
        tokens, logprobs = sample_tokens(logits, sampling, [generators[i] for i in rows])
        tok_list, lp_list = tokens.tolist(), logprobs.tolist()
        alive: list[int] = []
        for r, i in enumerate(rows):
            outs[i].ids.append(tok_list[r])
            outs[i].logprobs.append(lp_list[r])
            if tok_list[r] in stop_ids:
                outs[i].stopped = True
            elif len(outs[i].ids) < budgets[i]:
                alive.append(r)
        if not alive:
            break
        if len(alive) < len(rows):
            keep = torch.tensor(alive, dtype=torch.long, device=device)
            past.batch_select_indices(keep)
            tokens, attention, next_pos = tokens[keep], attention[keep], next_pos[keep]
            rows = [rows[r] for r in alive]
        attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
        out = model(input_ids=tokens[:, None].to(device), attention_mask=attention,
                    position_ids=next_pos[:, None], use_cache=True, **{cache_kw: past})
        past = _out_cache(out)
        logits = out.logits[:, -1, :]
        next_pos = next_pos + 1
    return outs
