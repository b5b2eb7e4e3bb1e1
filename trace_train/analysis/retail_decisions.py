"""Decision outcomes on retail-sim: where a capability decides an episode, did the agent act right or wrong?

The programmatic probes (:mod:`trace_train.analysis.retail_probes`) label whole episodes and count a part the agent
never reached as PRESENT. To see how strongly a model *expresses* an injected deficit -- the rate at which it
takes the right action once it is at the decision, to be set against the ``1 - knob`` of the expert it was
cloned from -- each decision is counted only when the agent reached it. Per intent of the task annotation
(``info['task']``):

* ``precondition_verification`` -- an intent forbidden by ownership whose order the agent looked up: wrong when
  it wrote on that order, right otherwise;
* ``structured_data_reasoning`` -- an allowed exchange / item change with a swap write on its order: right iff the
  new item is the target; a question answered with an amount: right iff it is the total;
* ``tool_calling_precision`` -- an allowed intent that needs exact arguments, with a write of its gold tool on its
  order: right iff every argument equals the gold one;
* ``multi_step_task_completion`` -- every intent after the first, once the one before it was handled: right iff
  this one is handled too (a write on its order, or its order id in a reply).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trace_envs.records import TrajectoryRecord
from trace_train.analysis.messages import ToolCall, tool_calls
from trace_train.analysis.retail_probes import (
    _SWAP_TOOLS,
    _answer_given,
    _gold_for,
    _same_args,
    _texts,
    _writes_on,
    needs_exact_arguments,
    task_of,
)

CAPABILITIES = ("precondition_verification", "structured_data_reasoning", "multi_step_task_completion",
                "tool_calling_precision")
_LOOKUP = "get_order_details"


@dataclass
class DecisionTally:
    """Decisions of one capability that were reached, split by whether the agent acted right."""

    right: int = 0
    wrong: int = 0

    @property
    def reached(self) -> int:
        return self.right + self.wrong

    @property
    def rate(self) -> float | None:
        return self.right / self.reached if self.reached else None

    def add(self, right: bool) -> None:
        if right:
            self.right += 1
        else:
            self.wrong += 1


def _looked_up(calls: list[ToolCall], order_id: str) -> bool:
    return any(c.name == _LOOKUP and c.arguments.get("order_id") == order_id for c in calls)


def decision_outcomes(record: TrajectoryRecord) -> dict[str, DecisionTally]:
    """The reached decisions of one retail-sim episode, per capability (see the module docstring)."""
    task = task_of(record)
    calls = tool_calls(record.messages)
    texts = _texts(record)
    out = {cap: DecisionTally() for cap in CAPABILITIES}
    intents = task["intents"]
    for intent in intents:
        order_id = intent["order_id"]
        if intent.get("ineligible_reason") == "ownership" and _looked_up(calls, order_id):
            out["precondition_verification"].add(not _writes_on(calls, order_id))
        if intent.get("eligible", True) and intent["kind"] in ("exchange", "modify_items"):
            for call in _writes_on(calls, order_id, _SWAP_TOOLS):
                new = [str(x) for x in call.arguments.get("new_item_ids", [])]
                out["structured_data_reasoning"].add(new == [intent["target_item_id"]])
        if intent["kind"] == "question":
            answered = _answer_given(record, intent)
            if answered is not None:
                out["structured_data_reasoning"].add(answered)
        gold = _gold_for(task, order_id) if needs_exact_arguments(intent) else None
        if gold is not None:
            for call in _writes_on(calls, order_id, (gold[0],)):
                out["tool_calling_precision"].add(_same_args(call.arguments, gold[1]))
    handled = [bool(_writes_on(calls, i["order_id"])) or any(i["order_id"] in t for t in texts) for i in intents]
    for previous, this in zip(handled, handled[1:]):
        if not previous:
            break
        out["multi_step_task_completion"].add(this)
    return out


def tally_decisions(records: Iterable[TrajectoryRecord]) -> dict[str, DecisionTally]:
    """:func:`decision_outcomes` summed over ``records``."""
    total = {cap: DecisionTally() for cap in CAPABILITIES}
    for record in records:
        for cap, t in decision_outcomes(record).items():
            total[cap].right += t.right
            total[cap].wrong += t.wrong
    return total
