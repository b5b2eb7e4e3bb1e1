"""``trace/retail-sim-v0``: the built-in, offline target shaped like τ²-Bench retail.

Reward (τ²-style): 0 unless the episode ended normally (user stop, agent stop or transfer); else
[end-state DB hash == gold replay's] × [every required string communicated]. An ineligible request (another
customer's order, a status that forbids it) is communicated only by an assistant text that refuses
(``trace_envs.core.communication.is_refusal``) and names its order, with no write on that order the tools accepted:
the order id alone is in the user's own opening. The gold replay takes the payment method of an exchange or item
change whose request names none as the agent chose it, when the tools accepted it
(``trace_envs.retail_sim.tools.settle_as_chosen``). ``success`` is stricter ("grounded"): reward 1 *and* every id the
agent passed to a tool named a real entity *and* the agent looked up every order it was asked about — so a refusal
that guessed does not count.

``reset(options={"hint": True})`` (paper §3.5, ``trace_envs.hints``) appends the hint of one capability
the task requires (chosen from the task itself, so the seed's draw is unchanged); a task that requires
none gets no hint (``info['hint']`` is ``None``). Evaluation never asks for hints.
"""

from __future__ import annotations

import hashlib
from typing import Any

from trace_envs.core.communication import assistant_texts, communicated, is_refusal, mentions
from trace_envs.core.kwarg_checks import choices, integer
from trace_envs.core.tool_env import Episode, Score, ToolUseEnv, UserReply
from trace_envs.core.tree_copy import copy_tree
from trace_envs.hints import CAPABILITY_HINTS, hint_requested, with_hint
from trace_envs.retail_sim.policy import POLICY
from trace_envs.retail_sim.scenario import INTENT_KINDS, Scenario, check_gift_card_rate, generate_scenario
from trace_envs.retail_sim.tools import (
    WRITE_TOOLS,
    build_toolbox,
    db_hash,
    payment_left_open,
    replay,
    settle_as_chosen,
)
from trace_envs.retail_sim.user import ScriptedUser

NORMAL_ENDINGS = frozenset({"user_stop", "agent_stop", "transfer"})
MAX_INTENTS = 7
_ID_KEYS = ("user_id", "order_id", "product_id", "item_id", "payment_method_id", "email")
_ID_LIST_KEYS = ("item_ids", "new_item_ids")


class IdLedger:
    """Which ids the agent used and whether each names a real entity of the DB."""

    def __init__(self, db: dict[str, Any]):
        self.users = set(db["users"])
        self.emails = {u["email"].lower() for u in db["users"].values()}
        self.orders = set(db["orders"])
        self.products = set(db["products"])
        self.items = {i for p in db["products"].values() for i in p["variants"]}
        self.payments = {pm for u in db["users"].values() for pm in u["payment_methods"]}
        self.total = 0
        self.valid = 0
        self.looked_up_orders: set[str] = set()

    def _known(self, key: str, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        return {
            "user_id": value in self.users, "order_id": value in self.orders,
            "product_id": value in self.products, "item_id": value in self.items,
            "payment_method_id": value in self.payments, "email": value.lower() in self.emails,
        }[key]

    def record(self, name: str, arguments: dict[str, Any]) -> None:
        for key in _ID_KEYS:
            if key in arguments:
                self.total += 1
                self.valid += self._known(key, arguments[key])
        for key in _ID_LIST_KEYS:
            values = arguments.get(key)
            if isinstance(values, list):
                for value in values:
                    self.total += 1
                    self.valid += self._known("item_id", value)
        if name == "get_order_details" and isinstance(arguments.get("order_id"), str):
            self.looked_up_orders.add(arguments["order_id"])

    @property
    def grounded(self) -> bool:
        return self.valid == self.total


def hint_capability(scenario: Scenario) -> str | None:
    """The required capability whose hint a hinted episode of ``scenario`` shows (None: none required)."""
    required = list(scenario.required_capabilities)
    if not required:
        return None
    key = "|".join(i.order_id for i in scenario.intents).encode()
    return required[int(hashlib.sha256(key).hexdigest(), 16) % len(required)]


class RetailSimEpisode(Episode):
    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.initial_db = copy_tree(scenario.db)
        self.db = scenario.db
        self.tools = build_toolbox(self.db)
        self.system_prompt = POLICY
        self.user = ScriptedUser(scenario)
        self.ledger = IdLedger(self.initial_db)
        self.writes: list[dict[str, Any]] = []
        self.task_info = scenario.annotation()

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.user.opening()}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return self.user.reply(assistant_text)

    def on_tool_call(self, name: str, arguments: dict[str, Any], error: bool) -> None:
        self.ledger.record(name, arguments)
        if name in WRITE_TOOLS:
            self.writes.append({"name": name, "arguments": arguments, "error": error})

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        intents = self.scenario.intents
        gold = settle_as_chosen(self.scenario.gold_actions, self.writes,
                                [i.order_id for i in intents if payment_left_open(i.utterance)])
        gold_hash = db_hash(replay(self.initial_db, gold))
        db_ok = float(termination in NORMAL_ENDINGS and db_hash(self.db) == gold_hash)
        comm_ok = float(termination in NORMAL_ENDINGS and communicated(transcript, self.scenario.communicate)
                        and all(self.refused(i.order_id, transcript) for i in intents if not i.eligible))
        reward = db_ok * comm_ok
        info = self.diagnostics()
        success = reward == 1.0 and info["ids_grounded"] and info["orders_checked"]
        return Score(reward=reward, success=success, breakdown={"db": db_ok, "communicate": comm_ok}, info=info)

    def refused(self, order_id: str, transcript: list[dict[str, Any]]) -> bool:
        """An ineligible request on ``order_id`` is told: a text that refuses names the order, and no write on it
        went through (a write the tools rejected, as on a status that forbids it, changed nothing)."""
        wrote = any(not w["error"] and isinstance(w["arguments"], dict) and w["arguments"].get("order_id") == order_id
                    for w in self.writes)
        return not wrote and any(is_refusal(t) and mentions(t, order_id) for t in assistant_texts(transcript))

    def diagnostics(self) -> dict[str, Any]:
        return {
            "ids_grounded": self.ledger.grounded,
            "id_args_total": self.ledger.total,
            "id_args_valid": self.ledger.valid,
            "orders_checked": all(i.order_id in self.ledger.looked_up_orders for i in self.scenario.intents),
            "writes": self.writes,
            "required_capabilities": list(self.scenario.required_capabilities),
        }


class RetailSimEnv(ToolUseEnv):
    """The built-in retail-sim target. ``n_intents``/``kinds`` pin the task mix (tests, curricula);
    ``gift_card_rate`` is the share of eligible returns asking for a gift-card refund (default: the target's 0.5)."""

    # Bumped whenever the episodes a seed produces change; caches of data-trained models key on it.
    data_version = 1

    def __init__(self, max_steps: int = 30, max_errors: int = 5, n_intents: int | None = None,
                 kinds: list[str] | None = None, gift_card_rate: float = 0.5, render_mode: str | None = None):
        super().__init__(max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        check_gift_card_rate(gift_card_rate)  # at construction, not at the first reset
        # a world holds 8 orders and a task may add a filler order: 7 requests at most
        self.n_intents = None if n_intents is None else integer("n_intents", n_intents, 1, MAX_INTENTS)
        self.kinds = choices("kinds", kinds, INTENT_KINDS)
        if self.kinds is not None and len(self.kinds) > MAX_INTENTS:
            raise ValueError(f"kinds lists {len(self.kinds)} requests; a task holds at most {MAX_INTENTS}")
        if self.kinds is not None and self.n_intents is not None and self.n_intents != len(self.kinds):
            raise ValueError(f"n_intents={self.n_intents} but kinds lists {len(self.kinds)} requests (one per "
                             "request); give one of them")
        self.gift_card_rate = gift_card_rate
        self._hint_capability: str | None = None

    def _new_episode(self, options: dict[str, Any] | None) -> RetailSimEpisode:
        scenario = generate_scenario(self.np_random, n_intents=self.n_intents, kinds=self.kinds,
                                     gift_card_rate=self.gift_card_rate)
        episode = RetailSimEpisode(scenario)
        self._hint_capability = hint_capability(scenario) if hint_requested(options) else None
        if self._hint_capability is not None:
            episode.system_prompt = with_hint(POLICY, CAPABILITY_HINTS[self._hint_capability])
        return episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        capability = self._hint_capability
        info.update(hint=CAPABILITY_HINTS[capability] if capability else None, hint_capability=capability,
                    unhinted_system_prompt=POLICY)
        return obs, info
