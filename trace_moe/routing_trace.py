"""Which slot the gates pick on each generated token of recorded trajectories, and per capability.

A teacher-forced forward of the composed model over a record's own ``token_ids`` (never re-tokenized text)
makes every block's gate decide for every position (a composition with ``scope: episode`` routed the whole
episode to the slot its rollout recorded in ``info["route"]``, so every token carries that slot). The decision
that *produced* generated token ``t`` is the one taken at input position ``t - 1``; the token's slot is the
top-1 slot most blocks chose there (ties: the larger summed routing weight, then the lower slot). The per-
capability table pools the generated tokens of every task that needs a capability (a task needing two counts
for both).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from trace_envs.records import TrajectoryRecord, task_capabilities
from trace_moe.composed import ComposedModel
from trace_moe.gated_lora import select_slots

logger = logging.getLogger(__name__)

NO_ANNOTATION = "(no capability annotation)"
MAX_TOKENS = 400  # generated tokens per record kept in the written trace (the table counts them all)


@dataclass
class RecordRouting:
    """The routing of one record's generated tokens.

    ``positions``: indices into the record's ``token_ids`` of its generated tokens (loss mask 1);
    ``slots``: the chosen slot of each (block majority); ``layer_slots``: per block, each token's top-1 slot.
    """

    episode_id: str
    env_id: str
    seed: int
    success: bool
    capabilities: list[str]
    positions: list[int]
    token_ids: list[int]
    slots: list[int]
    layer_slots: list[list[int]]
    tokens: list[str] = field(default_factory=list)  # token strings, filled when a tokenizer is given


@dataclass
class CapabilityRouting:
    """Generated tokens of the tasks that need one capability, and the share routed to each slot."""

    capability: str
    tasks: int
    tokens: int
    shares: list[float]


@dataclass
class RoutingTrace:
    slot_names: list[str]
    records: list[RecordRouting]
    by_capability: list[CapabilityRouting]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _majority(layer_top: torch.Tensor, layer_weight: torch.Tensor, num_slots: int) -> torch.Tensor:
    """(L, T) top-1 slots and their (L, T) weights -> (T,) the slot most blocks chose (ties as documented)."""
    onehot = torch.nn.functional.one_hot(layer_top, num_slots).float()  # (L, T, S)
    votes = onehot.sum(0)
    mass = (onehot * layer_weight[..., None]).sum(0)
    # votes dominate; summed weight (< L <= votes' unit step scaled) breaks ties; lower slot last
    score = votes * (layer_top.shape[0] + 1) + mass / (mass.sum(-1, keepdim=True) + 1e-9)
    return score.argmax(-1)


@torch.no_grad()
def route_record(composed: ComposedModel, record: TrajectoryRecord, max_len: int | None = None) -> RecordRouting:
    """The gates' choice on each generated token of ``record`` (teacher-forced over its ``token_ids``)."""
    ids, mask = record.token_ids, record.loss_mask
    if not ids or mask is None:
        raise ValueError(f"record {record.episode_id!r} has no token ids / loss mask (a non-token backend?)")
    if len(mask) != len(ids):
        raise ValueError(f"record {record.episode_id!r}: loss mask length {len(mask)} != {len(ids)} token ids")
    if max_len is not None:
        ids, mask = ids[:max_len], mask[:max_len]
    positions = [t for t, m in enumerate(mask) if m and t > 0]
    device = next(composed.gates.parameters()).device
    layer_slots: list[list[int]] = []
    slots: list[int] = []
    if composed.gate_config.scope == "episode":  # one learned route per episode, recorded by the rollout
        route = (record.info or {}).get("route")
        if not isinstance(route, dict) or "slot" not in route:
            raise ValueError(f"record {record.episode_id!r} has no info['route']: it was not played by the "
                             f"episode-routed composition")
        slots = [int(route["slot"])] * len(positions)
        layer_slots = [list(slots) for _ in composed.gates]
    elif positions:
        inp = torch.tensor([ids], dtype=torch.long, device=device)
        composed(input_ids=inp, attention_mask=torch.ones_like(inp), use_cache=False)
        prev = torch.tensor([t - 1 for t in positions], device=device)
        tops, weights = [], []
        for gate in composed.gates:
            w = gate.last_weights[0].float().index_select(0, prev)  # (T, S): the decision producing each token
            # among the slots weighing most, the gate's first choice (its logits): under ``weighting: selection``
            # every chosen slot of a top-k gate weighs 1.0; a forced slot weighs 1.0 alone
            heaviest = w >= w.max(-1, keepdim=True).values - 1e-6
            logits = gate.last_logits[0].float().index_select(0, prev).masked_fill(~heaviest, float("-inf"))
            top_i = select_slots(logits, 1)[:, 0]
            top_w = w.gather(-1, top_i[:, None])[:, 0]
            tops.append(top_i)
            weights.append(top_w)
        layer_top = torch.stack(tops)
        layer_slots = layer_top.cpu().tolist()
        slots = _majority(layer_top, torch.stack(weights), composed.num_slots).cpu().tolist()
    return RecordRouting(
        episode_id=record.episode_id, env_id=record.env_id, seed=int(record.seed), success=bool(record.success),
        capabilities=task_capabilities(record.info) or [], positions=positions,
        token_ids=[int(ids[t]) for t in positions], slots=[int(s) for s in slots], layer_slots=layer_slots,
    )


def capability_table(routings: Sequence[RecordRouting], num_slots: int) -> list[CapabilityRouting]:
    """capability -> share of its tasks' generated tokens routed to each slot (rows sorted by name;
    tasks without annotation under :data:`NO_ANNOTATION`, last; a capability without tokens is left out)."""
    counts: dict[str, list[int]] = {}
    tasks: dict[str, int] = {}
    for r in routings:
        for cap in dict.fromkeys(r.capabilities or [NO_ANNOTATION]):
            row = counts.setdefault(cap, [0] * num_slots)
            tasks[cap] = tasks.get(cap, 0) + 1
            for s in r.slots:
                row[s] += 1
    out = []
    for cap in sorted(counts, key=lambda c: (c == NO_ANNOTATION, c)):
        total = sum(counts[cap])
        if total:
            out.append(CapabilityRouting(cap, tasks[cap], total, [c / total for c in counts[cap]]))
    return out


def routing_trace(composed: ComposedModel, records: Sequence[TrajectoryRecord],
                  decode: Callable[[int], str] | None = None, max_len: int | None = None) -> RoutingTrace:
    """Route every record with token data (others are skipped with a warning) and build the table.

    ``decode`` maps a token id to its text (e.g. ``lambda i: tok.decode([i])``) for the token strings.
    """
    routings = []
    for record in records:
        if not record.token_ids or record.loss_mask is None:
            logger.warning("routing trace: record %s has no token ids; skipped", record.episode_id)
            continue
        r = route_record(composed, record, max_len)
        if decode is not None:
            r.tokens = [decode(i) for i in r.token_ids]
        routings.append(r)
    return RoutingTrace(composed.slot_names, routings, capability_table(routings, composed.num_slots))


def sample_records(records: Sequence[TrajectoryRecord], n: int) -> list[TrajectoryRecord]:
    """At most ``n`` records with token data, in file order, failures and successes alternating where both exist."""
    usable = [r for r in records if r.token_ids and r.loss_mask is not None]
    fails = [r for r in usable if not r.success]
    wins = [r for r in usable if r.success]
    picked: list[TrajectoryRecord] = []
    while len(picked) < n and (fails or wins):
        for pool in (fails, wins):
            if pool and len(picked) < n:
                picked.append(pool.pop(0))
    order = {id(r): i for i, r in enumerate(usable)}
    return sorted(picked, key=lambda r: order[id(r)])


def write_routing_trace(composed_dir: str | Path, trajectories: str | Path, out_path: str | Path, sample: int,
                        tokenizer_dir: str | Path | None = None, max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    """Trace ``sample`` records of ``trajectories`` through the saved composition and write the JSON document
    the report reads: slot names, per record its tokens (text + slot, at most ``max_tokens``) and capabilities,
    and the per-capability table (over every generated token of the sampled records)."""
    from transformers import AutoTokenizer

    from trace_envs.records import read_trajectories, write_json_atomic

    composed = ComposedModel.load(composed_dir).eval()
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir or json.loads(
        (Path(composed_dir) / "compose.json").read_text())["base_model"]))
    picked = sample_records(read_trajectories(trajectories), sample)
    trace = routing_trace(composed, picked, decode=lambda i: tok.decode([i]))
    doc = {
        "source": Path(trajectories).name, "sample": len(trace.records), "slot_names": trace.slot_names,
        "max_tokens": max_tokens,
        "records": [{"id": r.episode_id, "env": r.env_id, "seed": r.seed, "success": r.success,
                     "caps": r.capabilities, "n_tokens": len(r.slots), "tokens": r.tokens[:max_tokens],
                     "slots": r.slots[:max_tokens]} for r in trace.records],
        "by_capability": [asdict(row) for row in trace.by_capability],
    }
    write_json_atomic(out_path, doc)
    logger.info("routing trace of %d trajectories: %s", len(trace.records), out_path)
    return {"routing_trace": str(out_path), "sample": len(trace.records)}
