"""Programmatic labeler for τ²-Bench trajectories (airline, retail): capability labels from the agent's
tool calls against the task's gold actions and the DB records the agent read.

Two kinds of records carry what it needs:
* family episodes on a τ² domain (``domain="tau2-*"``): ``info['task']`` has the requests (entity,
  refusal case, gold write, selection target and decoys, question answer);
* target episodes (``trace/tau2-<domain>[-llm]-v0``): the gold actions come from the task file named by
  ``info['tau2_task']`` / ``info['task']`` (``task_id``, ``task_source``), read through tau2.

Probes (NA when the task does not need the capability; PRESENT when unsure, as the paper asks):
* precondition_verification — LACKING for a write on a request that had to be refused, or a write on
  a record the agent never read before writing (family records); on target records, whose gold lists
  only what the agent must do (often without the reads), LACKING for a write on a record no gold
  write changes with that tool: an action the policy forbade (another customer's record, a request
  that had to be refused);
* multi_step_task_completion — LACKING when the agent stopped with a gold write left undone (gold
  writes matched to the agent's by tool and record, with multiplicity);
* tool_calling_precision — LACKING for a write on a gold write's tool and record whose arguments match
  none of the gold writes on that tool and record (record choices aside);
* structured_data_reasoning — LACKING for the wrong record among the candidates (a decoy reservation or
  variant) or a wrong value stated for a question.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from trace_envs.core.communication import amounts_told, dollar_amounts, seen_numbers
from trace_envs.records import TrajectoryRecord
from trace_train.analysis.labels import Label
from trace_train.analysis.messages import ToolCall, assistant_texts, tool_calls
from trace_train.analysis.probes import Probe, register_probe, register_probe_domain

DOMAIN = "tau2"
register_probe_domain(DOMAIN, lambda env_id: "tau2-" in str(env_id))

ENTITY_KEYS = ("order_id", "reservation_id", "user_id")
CHOICE_KEYS = ("new_item_ids",)  # arguments that pick a record among candidates (structured, not precision)
ORDERLESS_KEYS = ("item_ids",)  # lists tau2 sorts before it acts: their order is not part of a precise call
READ_TOOLS = ("get_order_details", "get_reservation_details", "get_user_details")
_NORMAL = ("user_stop", "agent_stop", "transfer")
RequestsBody = Callable[[TrajectoryRecord, list[dict[str, Any]]], Label]
DESCRIPTIONS = {  # the capabilities' descriptions, as registered
    "precondition_verification":
        "Before a state-changing action the agent reads the record and checks that the policy allows "
        "it (authentication, ownership, status, the domain's cancellation / baggage rules) and refuses "
        "when it does not. NA when no request in the task is forbidden by such a precondition.",
    "multi_step_task_completion":
        "When the user makes several requests the agent carries every one of them through (every gold "
        "write done) before ending the conversation. NA for tasks with fewer than two gold writes.",
    "tool_calling_precision":
        "The agent fills every argument of a state-changing call exactly as the request and the records "
        "require (reason, refund or payment method, address lines, passenger data, bag counts). "
        "NA when no gold write needs exact arguments.",
    "structured_data_reasoning":
        "The agent reads structured tool output and derives the right record or value from it: the "
        "reservation or variant that meets every stated constraint among candidates, or an aggregate "
        "such as a total. NA when the task needs no such choice.",
}


def is_tau2_record(record: TrajectoryRecord) -> bool:
    task = record.info.get("task")
    return "tau2-" in record.env_id or (isinstance(task, dict) and task.get("benchmark") == "tau2")


@functools.lru_cache(maxsize=64)
def _target_gold(domain: str, source: str, task_id: str) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    from trace_envs.tau2.tasks import load_task_set

    task = load_task_set(domain, source if source != "bundled" else "bundled").tasks[task_id]
    crit = task.evaluation_criteria
    return tuple((a.name, tuple(sorted(dict(a.arguments).items()))) for a in (crit.actions or [])) if crit else ()


def requests_of(record: TrajectoryRecord) -> list[dict[str, Any]]:
    """Per request: ``entity``, ``case``, ``gold`` ([name, args] or None), ``kind``, ``target``, ``decoys``,
    ``answer``; one request per gold write for target-env records."""
    task = record.info.get("task") or {}
    if isinstance(task, dict) and task.get("requests"):
        gold_reqs = task.get("gold", {}).get("requests", [{}] * len(task["requests"]))
        out = []
        for spec, gold in zip(task["requests"], gold_reqs):
            case = gold.get("case", "allow")
            write = spec.get("write") if case == "allow" and spec.get("kind") != "question" else None
            out.append({"entity": spec["entity_id"], "case": case, "gold": write, "kind": spec.get("kind"),
                        "target": gold.get("target"), "decoys": gold.get("decoys", []), "answer": gold.get("answer"),
                        "exact": bool(spec.get("sloppy"))})
        return out
    meta = record.info.get("tau2_task") or task
    if not isinstance(meta, dict) or "task_id" not in meta:
        raise ValueError(f"{record.episode_id}: no τ² task annotation (info['task'] or info['tau2_task'])")
    from trace_envs.tau2.runtime import DOMAINS

    domain = meta.get("domain") or next(d for d in DOMAINS if f"tau2-{d}" in record.env_id)
    source = str(meta.get("task_source", "bundled"))
    out = []
    for name, args in _target_gold(domain, source, str(meta["task_id"])):
        args = dict(args)
        entity = next((str(args[k]) for k in ENTITY_KEYS if k in args), "")
        if name.startswith(("get_", "find_", "search_", "list_", "calculate", "transfer")):
            continue
        out.append({"entity": entity, "case": "allow", "gold": [name, args], "kind": name, "target": None,
                    "decoys": [], "answer": None, "exact": True})
    return out


def is_target_record(record: TrajectoryRecord) -> bool:
    """A target-env record (gold from the task file), not a family episode (gold requests in the task)."""
    task = record.info.get("task")
    return not (isinstance(task, dict) and task.get("requests"))


def _entity(call: ToolCall) -> str:
    return next((str(call.arguments[k]) for k in ENTITY_KEYS if k in call.arguments), "")


def _writes(record: TrajectoryRecord) -> list[ToolCall]:
    from trace_envs.tau2.runtime import tau2_available

    names = _write_tools() if tau2_available() else None
    calls = tool_calls(record.messages)
    if names is None:
        from trace_train.analysis.messages import is_write_tool

        return [c for c in calls if is_write_tool(c.name)]
    return [c for c in calls if c.name in names]


@functools.lru_cache(maxsize=1)
def _write_tools() -> frozenset[str]:
    from trace_envs.domains import get_domain

    return get_domain("tau2-airline").write_tools | get_domain("tau2-retail").write_tools


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return str(value)


def _tau2_probe(capability: str, needs: Callable[[dict[str, Any]], bool] | None = None,
                at_least: int = 1) -> Callable[[RequestsBody], Probe]:
    """Register ``body`` as the τ² probe of ``capability`` (described in ``DESCRIPTIONS``).

    With ``needs`` the probe is NA unless at least ``at_least`` of the record's requests (``requests_of``)
    satisfy it, and ``body(record, those requests)`` labels the rest; without, ``body`` gets every request."""

    def deco(body: RequestsBody) -> Probe:
        @functools.wraps(body)
        def probe(record: TrajectoryRecord) -> Label:
            requests = requests_of(record)
            if needs is None:
                return body(record, requests)
            needed = [r for r in requests if needs(r)]
            return Label.NA if len(needed) < at_least else body(record, needed)

        return register_probe(DOMAIN, capability, DESCRIPTIONS[capability])(probe)

    return deco


@_tau2_probe("precondition_verification")
def probe_precondition(record: TrajectoryRecord, requests: list[dict[str, Any]]) -> Label:
    writes = _writes(record)
    if is_target_record(record):
        allowed = {(r["gold"][0], r["entity"]) for r in requests if r["gold"]}
        return Label.LACKING if any((w.name, _entity(w)) not in allowed for w in writes) else Label.PRESENT
    guarded = [r for r in requests if r["case"] != "allow"]
    calls = tool_calls(record.messages)
    forbidden = {r["entity"] for r in guarded}
    if any(_entity(w) in forbidden for w in writes):
        return Label.LACKING
    for w in writes:  # a write on a record the agent never read before it
        read = any(c.index < w.index and c.name in READ_TOOLS and _entity(c) == _entity(w) for c in calls)
        if _entity(w) and not read and not w.name.startswith("book"):
            return Label.LACKING
    return Label.PRESENT if guarded else Label.NA


@_tau2_probe("multi_step_task_completion", needs=lambda r: bool(r["gold"]), at_least=2)
def probe_multi_step(record: TrajectoryRecord, gold: list[dict[str, Any]]) -> Label:
    if record.termination not in _NORMAL:
        return Label.PRESENT  # it did not stop: truncation is not this capability
    made = Counter((w.name, _entity(w)) for w in _writes(record))
    needed = Counter((r["gold"][0], r["entity"]) for r in gold)
    return Label.PRESENT if all(made[key] >= n for key, n in needed.items()) else Label.LACKING


@_tau2_probe("tool_calling_precision", needs=lambda r: bool(r["gold"] and r["exact"]))
def probe_precision(record: TrajectoryRecord, gold: list[dict[str, Any]]) -> Label:
    wants: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in gold:
        name, args = r["gold"]
        wants.setdefault((name, r["entity"]), []).append(_exact_args(args))
    for w in _writes(record):
        options = wants.get((w.name, _entity(w)))
        if options is not None and _exact_args(w.arguments) not in options:
            return Label.LACKING
    return Label.PRESENT


def _exact_args(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments a precise call must get right; lists tau2 treats as sets (``item_ids``: it sorts them) are
    compared in sorted order."""
    exact = {k: _norm(v) for k, v in args.items() if k not in CHOICE_KEYS}
    for key in ORDERLESS_KEYS:
        if isinstance(exact.get(key), list):
            exact[key] = sorted(exact[key], key=str)
    return exact


def _stated_wrong_value(record: TrajectoryRecord, request: dict[str, Any]) -> bool:
    """Whether the agent states an amount but never the question's answer by the verifiers' rule
    (``trace_envs.core.communication.amounts_told``: a text stating the right amount beside no made-up one; the
    parts of a total may come first). No amount stated at all is not a wrong value."""
    texts = [text for _, text in assistant_texts(record.messages)]
    want = float(str(request["answer"]).replace("$", "").replace(",", ""))
    return (any(dollar_amounts(t) for t in texts)
            and not amounts_told(texts, [want], seen_numbers(record.messages)))


@_tau2_probe("structured_data_reasoning", needs=lambda r: bool(r["target"] or r["answer"]))
def probe_structured(record: TrajectoryRecord, requests: list[dict[str, Any]]) -> Label:
    writes = _writes(record)
    for r in requests:
        if r["answer"]:
            if _stated_wrong_value(record, r):
                return Label.LACKING
            continue
        decoys = {str(d) for d in r["decoys"]}
        for w in writes:
            if _entity(w) in decoys and _entity(w) != r["entity"]:
                return Label.LACKING
            chosen = [str(x) for x in w.arguments.get("new_item_ids", [])]
            if _entity(w) == r["entity"] and chosen and chosen != [str(r["target"])]:
                return Label.LACKING
    return Label.PRESENT
