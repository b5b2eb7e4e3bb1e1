"""Programmatic probes for the four real capabilities of retail-sim (the embedded default target).

Each probe reads the task's ground truth from ``record.info["task"]`` (the annotation retail-sim
exposes at reset: intents, gold actions, required capabilities) and judges what the agent actually
did in the messages against it:

* NA when the task does not require the capability (``required_capabilities``);
* LACKING when the agent did the part of the task that needs the capability, and did it wrong;
* PRESENT otherwise — including when the agent never reached that part (the paper's rule: when
  unsure on a failure, prefer PRESENT, because a false LACKING inflates Cov and Δ).
"""

from __future__ import annotations

from typing import Any

from trace_envs.core.communication import dollar_amounts
from trace_envs.records import TrajectoryRecord
from trace_train.analysis.labels import Label
from trace_train.analysis.messages import ToolCall, assistant_texts, is_write_tool, tool_calls
from trace_train.analysis.probes import register_probe, register_probe_domain

DOMAIN = "retail_sim"
register_probe_domain(DOMAIN, lambda env_id: "retail-sim" in env_id or "retail_sim" in env_id)

_SWAP_TOOLS = ("exchange_delivered_order_items", "modify_pending_order_items")


def task_of(record: TrajectoryRecord) -> dict[str, Any]:
    """The task annotation of a retail-sim record (``info['task']``); raises when it is absent."""
    task = record.info.get("task", record.info if "intents" in record.info else None)
    if not isinstance(task, dict) or "intents" not in task:
        raise ValueError(f"{record.episode_id}: no task annotation in info['task']")
    return task


def _required(task: dict[str, Any], capability: str) -> bool:
    return capability in task.get("required_capabilities", [])


def _writes_on(calls: list[ToolCall], order_id: str, names: tuple[str, ...] | None = None) -> list[ToolCall]:
    return [c for c in calls if is_write_tool(c.name) and c.arguments.get("order_id") == order_id
            and (names is None or c.name in names)]


def _texts(record: TrajectoryRecord) -> list[str]:
    return [t for _, t in assistant_texts(record.messages)]


def _number(text: str) -> float | None:
    try:
        return float(str(text).replace("$", "").replace(",", "").strip())
    except ValueError:
        return None


def needs_exact_arguments(intent: dict[str, Any]) -> bool:
    """An allowed intent whose write must carry a value the user stated (the stated cancel reason, the gift card
    refund, a whole new address): where tool-calling precision decides the task."""
    return bool(intent.get("eligible", True)) and (
        (intent["kind"] == "cancel" and intent.get("reason") == "ordered by mistake")
        or (intent["kind"] == "return" and bool(intent.get("refund_to_gift_card")))
        or intent["kind"] == "modify_address")


def _gold_for(task: dict[str, Any], order_id: str) -> tuple[str, dict[str, Any]] | None:
    for name, args in task.get("gold_actions", []):
        if args.get("order_id") == order_id:
            return name, args
    return None


def _normalized(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(map(str, v)) if isinstance(v, list) else str(v)) for k, v in args.items()}


def _same_args(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return _normalized(got) == _normalized(want)


def _answer_given(record: TrajectoryRecord, intent: dict[str, Any]) -> bool | None:
    """Question intents: True = right total stated, False = a wrong amount stated, None = no answer."""
    want = _number(intent.get("answer", ""))
    stated = None
    for text in _texts(record):
        amounts = dollar_amounts(text)
        if intent["order_id"] in text or amounts:
            if want is not None and any(abs(a - want) < 1e-6 for a in amounts):
                return True
            if amounts and intent["order_id"] in text:
                stated = False
    return stated


@register_probe(DOMAIN, "precondition_verification",
                "Before a state-changing action the agent checks that the policy allows it (the order "
                "belongs to the user and its status permits the action) and refuses when it does not. "
                "NA when no request in the task is forbidden by such a precondition.")
def probe_precondition(record: TrajectoryRecord) -> Label:
    task = task_of(record)
    if not _required(task, "precondition_verification"):
        return Label.NA
    calls = tool_calls(record.messages)
    forbidden = [i for i in task["intents"] if i.get("ineligible_reason") == "ownership"]
    if any(_writes_on(calls, i["order_id"]) for i in forbidden):
        return Label.LACKING
    return Label.PRESENT


@register_probe(DOMAIN, "structured_data_reasoning",
                "The agent reads structured tool output (records, lists of variants, prices) and "
                "derives the right value from it: the item satisfying every stated constraint, or an "
                "aggregate such as a total. NA when the task needs no such derivation.")
def probe_structured(record: TrajectoryRecord) -> Label:
    task = task_of(record)
    if not _required(task, "structured_data_reasoning"):
        return Label.NA
    calls = tool_calls(record.messages)
    for intent in task["intents"]:
        if not intent.get("eligible", True):
            continue
        if intent["kind"] in ("exchange", "modify_items"):
            for call in _writes_on(calls, intent["order_id"], _SWAP_TOOLS):
                if [str(x) for x in call.arguments.get("new_item_ids", [])] != [intent["target_item_id"]]:
                    return Label.LACKING
        elif intent["kind"] == "question" and _answer_given(record, intent) is False:
            return Label.LACKING
    return Label.PRESENT


@register_probe(DOMAIN, "multi_step_task_completion",
                "When the user makes several requests the agent carries every one of them through to "
                "an outcome (an action or an explicit answer/refusal) before ending the conversation. "
                "NA for single-request tasks.")
def probe_multi_step(record: TrajectoryRecord) -> Label:
    task = task_of(record)
    if not _required(task, "multi_step_task_completion"):
        return Label.NA
    calls = tool_calls(record.messages)
    texts = _texts(record)
    for intent in task["intents"]:
        order_id = intent["order_id"]
        handled = bool(_writes_on(calls, order_id)) or any(order_id in t for t in texts)
        if not handled:
            return Label.LACKING
    return Label.PRESENT


@register_probe(DOMAIN, "tool_calling_precision",
                "The agent fills every argument of a state-changing tool call exactly as the request "
                "and the records require (the stated reason, the requested refund method, every "
                "address field). NA when no write in the task needs such exact arguments.")
def probe_precision(record: TrajectoryRecord) -> Label:
    task = task_of(record)
    if not _required(task, "tool_calling_precision"):
        return Label.NA
    calls = tool_calls(record.messages)
    for intent in task["intents"]:
        gold = _gold_for(task, intent["order_id"]) if needs_exact_arguments(intent) else None
        if gold is None:
            continue
        for call in _writes_on(calls, intent["order_id"], (gold[0],)):
            if not _same_args(call.arguments, gold[1]):
                return Label.LACKING
    return Label.PRESENT
