"""Scripted retail-sim policies: the oracle and the imperfect expert (one knob per capability).

Both read the task annotation from ``info['task']`` at reset (privileged, like any scripted expert)
and react to tool observations; both emit ordinary assistant text that goes through the same parser
as a model's output. Knobs are probabilities in [0, 1]; the oracle is all knobs at 0:

* ``precondition``: act on an order without honouring the ownership/status check;
* ``structured``: pick the first variant of the right colour ignoring the price bound, and answer a
  total with the first item's price only;
* ``multi_step``: stop after the first request;
* ``precision``: imprecise write arguments (default cancel reason, refund to the original payment
  method, address2 dropped).

A hinted episode (``info['hint']``, ``trace_envs.hints``) is read with probability ``hint_uptake``: the
knob of the hinted capability becomes (1 - uptake) × k for that episode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.scripted import GeneratorScript, Script, last_tool_output
from trace_envs.episode import play_scripted

Action = str
Observation = list[dict[str, Any]]


@dataclass(frozen=True)
class ExpertKnobs:
    precondition: float = 0.0
    structured: float = 0.0
    multi_step: float = 0.0
    precision: float = 0.0

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"knob {name} must be in [0, 1], got {value}")


KNOB_TO_CAPABILITY = {
    "precondition": "precondition_verification",
    "structured": "structured_data_reasoning",
    "multi_step": "multi_step_task_completion",
    "precision": "tool_calling_precision",
}
CAPABILITY_TO_KNOB = {v: k for k, v in KNOB_TO_CAPABILITY.items()}


TASK_KEYS = ("identity", "identify_by", "intents")


def task_annotation_problem(info: dict[str, Any]) -> str | None:
    """Why the scripted experts cannot play an env whose reset info is ``info`` (None: they can)."""
    task = info.get("task")
    if not isinstance(task, dict):
        return "its reset info has no 'task' annotation"
    missing = [k for k in TASK_KEYS if k not in task]
    if missing:
        return f"its reset info['task'] lacks {missing} (the retail-sim task annotation the scripted experts read)"
    return None


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None


class ScriptedExpert(GeneratorScript):
    """A reactive scripted agent. ``reset(obs, info, seed)`` then ``act(obs)`` until the episode ends."""

    def __init__(self, knobs: ExpertKnobs | None = None, seed: int = 0, name: str | None = None,
                 hint_uptake: float = 0.0):
        self.knobs = knobs or ExpertKnobs()
        if not 0.0 <= hint_uptake <= 1.0:
            raise ValueError(f"hint_uptake must be in [0, 1], got {hint_uptake}")
        self.hint_uptake = hint_uptake
        self.seed = seed
        self.name = name or ("oracle" if self.knobs == ExpertKnobs() else "imperfect-expert")
        self._active = self.knobs  # this episode's knobs (a followed hint lowers one)

    def reset(self, observation: Observation, info: dict[str, Any], seed: int | None = None) -> None:
        problem = task_annotation_problem(info)
        if problem is not None:
            raise ValueError(f"the scripted {self.name} cannot play this env: {problem}")
        rng = np.random.default_rng([self.seed, 0 if seed is None else seed])
        self._active = self.knobs
        hinted = CAPABILITY_TO_KNOB.get(info.get("hint_capability") or "") if info.get("hint") else None
        if hinted is not None and self.hint_uptake:  # reads the hint with probability hint_uptake
            self._active = replace(self.knobs, **{hinted: getattr(self.knobs, hinted) * (1.0 - self.hint_uptake)})
        self._start(self._script(info["task"], rng))

    # -- the script -----------------------------------------------------------------------------
    def _script(self, task: dict[str, Any], rng: np.random.Generator) -> Script:
        knobs = self._active
        stop_after_first = rng.random() < knobs.multi_step
        ident = task["identity"]
        if task["identify_by"] == "email":
            obs = yield format_tool_call("find_user_id_by_email", {"email": ident["email"]})
        else:
            obs = yield format_tool_call("find_user_id_by_name_zip", {
                "first_name": ident["first_name"], "last_name": ident["last_name"], "zip": ident["zip"]})
        user_id = last_tool_output(obs)
        obs = yield format_tool_call("get_user_details", {"user_id": user_id})
        outcomes: list[str] = []
        for index, intent in enumerate(task["intents"]):
            if index > 0 and stop_after_first:
                break
            order_id = intent["order_id"]
            obs = yield format_tool_call("get_order_details", {"order_id": order_id})
            order = _json_or_none(last_tool_output(obs)) or {}
            kind = intent["kind"]
            if kind == "question":
                prices = [item["price"] for item in order.get("items", [])]
                if rng.random() < knobs.structured:
                    answer = str(prices[0]) if prices else "0"
                else:
                    obs = yield format_tool_call("calculate", {"expression": " + ".join(str(p) for p in prices)})
                    answer = last_tool_output(obs)
                outcomes.append(f"You paid ${answer} for order {order_id}.")
                continue
            refuse = self._refusal(intent, order, user_id)
            if refuse and not rng.random() < knobs.precondition:
                outcomes.append(refuse)
                continue
            call = self._write_call(intent, task, order, rng)
            if kind in ("exchange", "modify_items"):
                obs = yield format_tool_call("get_product_details", {"product_id": intent["product_id"]})
            obs = yield f"Please confirm: {call[2]}?"
            obs = yield format_tool_call(call[0], call[1])
            if last_tool_output(obs).startswith("Error"):
                outcomes.append(refuse or f"I could not complete the request for order {order_id}.")
            else:
                outcomes.append(self._done_sentence(kind, order_id))
        yield " ".join(outcomes)

    @staticmethod
    def _refusal(intent: dict[str, Any], order: dict[str, Any], user_id: str) -> str:
        order_id = intent["order_id"]
        if order.get("user_id") != user_id:
            return f"I cannot change order {order_id}: it is not your order."
        allowed = {"cancel": ("pending",), "modify_items": ("pending",), "modify_address": ("pending",),
                   "return": ("delivered",), "exchange": ("delivered",)}[intent["kind"]]
        if order.get("status") not in allowed:
            return f"I cannot {intent['kind'].replace('_', ' ')} order {order_id}: it is {order.get('status')}."
        return ""

    def _write_call(self, intent: dict[str, Any], task: dict[str, Any], order: dict[str, Any],
                    rng: np.random.Generator) -> tuple[str, dict[str, Any], str]:
        kind, order_id = intent["kind"], intent["order_id"]
        history = order.get("payment_history") or [{}]
        original = history[0].get("payment_method_id", task["original_payment"])
        sloppy = rng.random() < self._active.precision
        if kind == "cancel":
            reason = "no longer needed" if sloppy else intent["reason"]
            return "cancel_pending_order", {"order_id": order_id, "reason": reason}, \
                f"cancel order {order_id} because the item is {reason}"
        if kind == "return":
            method = task["gift_card"] if intent["refund_to_gift_card"] and not sloppy else original
            return "return_delivered_order_items", {
                "order_id": order_id, "item_ids": [intent["item_id"]], "payment_method_id": method}, \
                f"return the {intent['product']} of order {order_id} with refund to {method}"
        if kind in ("exchange", "modify_items"):
            wrong = rng.random() < self._active.structured
            new_item = intent["distractor_item_id"] if wrong else intent["target_item_id"]
            tool = "exchange_delivered_order_items" if kind == "exchange" else "modify_pending_order_items"
            return tool, {"order_id": order_id, "item_ids": [intent["item_id"]], "new_item_ids": [new_item],
                          "payment_method_id": original}, \
                f"swap the {intent['product']} of order {order_id} for item {new_item}"
        if kind == "modify_address":
            address = dict(intent["address"])
            if sloppy:
                address["address2"] = ""
            return "modify_pending_order_address", {"order_id": order_id, **address}, \
                f"ship order {order_id} to the new address"
        raise ValueError(f"no write for intent kind {kind!r}")

    @staticmethod
    def _done_sentence(kind: str, order_id: str) -> str:
        return {
            "cancel": f"Order {order_id} is cancelled.",
            "return": f"The return for order {order_id} is requested.",
            "exchange": f"The exchange for order {order_id} is requested.",
            "modify_items": f"Order {order_id} is modified.",
            "modify_address": f"The address of order {order_id} is updated.",
        }[kind]


def run_episode(env: Any, policy: ScriptedExpert, seed: int) -> tuple[float, dict[str, Any], list[dict[str, Any]]]:
    """Play one episode of a scripted policy (:func:`trace_envs.episode.play_scripted`); returns
    (reward, final info incl. ``task``, transcript)."""
    result = play_scripted(env, policy, seed)
    return result.reward, {**result.info, "task": result.reset_info["task"]}, result.transcript
