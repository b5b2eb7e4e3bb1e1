"""retail-sim as a family domain: every primitive is built from retail-sim's own world builder,
tools, gold replay, hash, user and expert (``trace_envs.retail_sim``), so family tasks have exactly
the shape of retail-sim tasks (``Intent``/``Scenario``) and ``ScriptedExpert`` plays them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_envs.core.tools import ToolBox
from trace_envs.core.tree_copy import copy_tree
from trace_envs.domains.base import Domain, Request
from trace_envs.retail_sim.experts import ExpertKnobs, ScriptedExpert
from trace_envs.retail_sim.policy import POLICY
from trace_envs.retail_sim.pools import PRODUCTS
from trace_envs.retail_sim.scenario import (
    REASON_PHRASES,
    Intent,
    Scenario,
    WorldBuilder,
    address_change_intent,
    gold_action,
    required_capabilities,
)
from trace_envs.retail_sim.tools import (
    WRITE_TOOLS,
    build_toolbox,
    db_hash,
    payment_left_open,
    replay,
    settle_as_chosen,
)
from trace_envs.retail_sim.user import ScriptedUser

_GOOD_STATUS = {"cancel": "pending", "return": "delivered"}
_BAD_STATUS = {"cancel": ("delivered", "processed"), "return": ("pending", "processed")}
_OWNERSHIP_WORDS = ("not your", "another", "belong", "someone else", "other customer", "other user", "not yours")


RETAIL_REQUEST_KINDS = {"guarded": ("cancel", "return"), "plain": ("cancel", "return"),
                        "selection": ("exchange", "modify_items"), "question": ("question",),
                        "exact": ("cancel", "return", "modify_address")}


def retail_request_kinds(purpose: str) -> tuple[str, ...]:
    """The retail request kinds that serve a family's ``purpose`` (shared by retail-sim and τ² retail)."""
    if purpose not in RETAIL_REQUEST_KINDS:
        raise ValueError(f"unknown request purpose {purpose!r}; known: {sorted(RETAIL_REQUEST_KINDS)}")
    return RETAIL_REQUEST_KINDS[purpose]


def retail_scoring_gold(requests: list[Request], writes: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``Domain.scoring_gold`` of the retail domains (retail-sim and τ² retail): an exchange or item change whose
    request names no payment method is right with any method of the user the tools accept
    (``trace_envs.retail_sim.tools.settle_as_chosen``, the rule the retail-sim target judges by too)."""
    gold = [action for request in requests for action in request.gold_actions]
    words = {r.entity_id: f"{r.utterance} {r.details.get('correction', '')}" for r in requests}
    return settle_as_chosen(gold, writes, [oid for oid, text in words.items() if payment_left_open(text)])


@dataclass
class RetailWorld:
    builder: WorldBuilder
    identify_by: str


def _pick(rng: np.random.Generator, values: tuple | list) -> Any:
    return values[int(rng.integers(len(values)))]


class RetailSimDomain(Domain):
    name = "retail-sim"
    policy = POLICY
    write_tools = WRITE_TOOLS
    selection_styles = ("mixed", "price_bound")
    guard_cases = ("allow", "ownership", "status")

    # -- world, tools, verification --------------------------------------------------------------
    def new_world(self, rng: np.random.Generator, split: str = "train") -> RetailWorld:
        """Generated per seed: every split draws from the same generator (``split`` is not used)."""
        builder = WorldBuilder(rng)
        world = RetailWorld(builder, "email" if rng.random() < 0.7 else "name_zip")
        if rng.random() < 0.5:  # a filler order, as in retail-sim
            builder.own_order(_pick(rng, ("pending", "delivered", "cancelled")))
        return world

    def world_db(self, world: RetailWorld) -> dict[str, Any]:
        return world.builder.db

    def build_tools(self, db: dict[str, Any]) -> ToolBox:
        return build_toolbox(db)

    def replay(self, db: dict[str, Any], actions: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        return replay(db, actions)

    def snapshot(self, db: dict[str, Any]) -> dict[str, Any]:
        """A deep copy of ``db`` (``copy_tree``: same result as ``copy.deepcopy``, several times faster)."""
        return copy_tree(db)

    def db_hash(self, db: dict[str, Any]) -> str:
        return db_hash(db)

    def scoring_gold(self, requests: list[Request], writes: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        return retail_scoring_gold(requests, writes)

    def entity_states(self, db: dict[str, Any]) -> dict[str, Any]:
        states = {f"order:{k}": v for k, v in db["orders"].items()}
        states.update({f"user:{k}": v for k, v in db["users"].items()})
        states.update({f"product:{k}": v for k, v in db["products"].items()})
        return states

    def entity_key(self, request: Request) -> str:
        return f"order:{request.entity_id}"

    # -- request primitives ----------------------------------------------------------------------
    def kinds(self, purpose: str) -> tuple[str, ...]:
        return retail_request_kinds(purpose)

    def _request(self, world: RetailWorld, intent: Intent, case: str = "allow",
                 reason_words: tuple[str, ...] = (), **details: Any) -> Request:
        gold = gold_action(intent, world.builder)
        communicate = [intent.answer] if intent.kind == "question" else ([] if intent.eligible else [intent.order_id])
        return Request(kind=intent.kind, entity_id=intent.order_id, utterance=intent.utterance,
                       gold_actions=[gold] if gold else [], communicate=communicate, case=case,
                       reason_words=reason_words, details=details, native=intent)

    def _write_request(self, world: RetailWorld, rng: np.random.Generator, kind: str, order: dict[str, Any],
                       intent: Intent, reason: str, gift_card: bool) -> Intent:
        item = order["items"][0]
        intent.order_id = order["order_id"]
        intent.item_id, intent.product, intent.product_id = item["item_id"], item["name"], item["product_id"]
        if kind == "cancel":
            intent.reason = reason
            intent.utterance = f"Please cancel my order {intent.order_id}, {REASON_PHRASES[reason]}."
        else:
            intent.refund_to_gift_card = gift_card
            if gift_card:
                world.builder.ensure_gift_card()
            refund = " and get the refund on my gift card" if gift_card else ""
            intent.utterance = f"I want to return the {intent.product} from order {intent.order_id}{refund}."
        return intent

    def guarded_request(self, world: RetailWorld, rng: np.random.Generator, kind: str, case: str) -> Request:
        if kind not in _GOOD_STATUS:
            raise ValueError(f"retail-sim guarded kinds are {sorted(_GOOD_STATUS)}, got {kind!r}")
        b = world.builder
        if case == "allow":
            order, intent, words = b.own_order(_GOOD_STATUS[kind]), Intent(kind, ""), ()
        elif case == "ownership":
            # the user has an order of their own here too: with an empty order list the refusal would be read
            # off "orders": [] (a cue allowed and status cases never show) instead of off whose order it is
            b.own_order(_pick(rng, ("pending", "delivered", "cancelled")))
            order = b.add_order(b.other, _GOOD_STATUS[kind], int(rng.integers(1, 3)), b.other_payment)
            intent, words = Intent(kind, "", eligible=False, ineligible_reason="ownership"), _OWNERSHIP_WORDS
        elif case == "status":
            order = b.own_order(_pick(rng, _BAD_STATUS[kind]))
            intent, words = Intent(kind, "", eligible=False, ineligible_reason="status"), (order["status"],)
        else:
            raise ValueError(f"retail-sim supports guard cases {self.guard_cases}, got {case!r}")
        self._write_request(world, rng, kind, order, intent, "no longer needed", gift_card=False)
        return self._request(world, intent, case=case, reason_words=words)

    def plain_request(self, world: RetailWorld, rng: np.random.Generator, kind: str) -> Request:
        return self.guarded_request(world, rng, kind, "allow")

    def exact_request(self, world: RetailWorld, rng: np.random.Generator, kind: str) -> Request:
        b = world.builder
        if kind == "modify_address":
            return self._request(world, address_change_intent(b, rng))
        if kind not in _GOOD_STATUS:
            raise ValueError(f"retail-sim exact kinds are {self.kinds('exact')}, got {kind!r}")
        intent = self._write_request(world, rng, kind, b.own_order(_GOOD_STATUS[kind]), Intent(kind, ""),
                                     "ordered by mistake", gift_card=True)
        return self._request(world, intent)

    def apply_correction(self, world: RetailWorld, rng: np.random.Generator, request: Request) -> str:
        intent: Intent = request.native
        if intent.kind == "cancel":
            first = f"Please cancel my order {intent.order_id}, {REASON_PHRASES['no longer needed']}."
            fix = f"Sorry, to be precise: {REASON_PHRASES[intent.reason]}."
        elif intent.kind == "return":
            first = f"I want to return the {intent.product} from order {intent.order_id}."
            fix = "Actually, please put the refund on my gift card."
        else:
            wrong = dict(intent.address)
            while wrong["address2"] == intent.address["address2"]:
                wrong["address2"] = _pick(rng, world.builder.p.suites)
            first = (f"Please ship order {intent.order_id} to {wrong['address1']}, {wrong['address2']}, "
                     f"{wrong['city']}, {wrong['state']}, {wrong['zip']}.")
            fix = f"Sorry, I gave the wrong suite: it is {intent.address['address2']}."
        intent.utterance = request.utterance = first
        return fix

    def question_request(self, world: RetailWorld, rng: np.random.Generator, n_records: int) -> Request:
        n = int(np.clip(n_records, 2, len(PRODUCTS)))
        order = world.builder.own_order(_pick(rng, ("pending", "delivered", "processed")), n_items=n)
        total = sum(i["price"] for i in order["items"])
        intent = Intent("question", order["order_id"], answer=f"${round(total, 2)}")
        intent.utterance = f"How much did I pay in total for the items in order {order['order_id']}?"
        return self._request(world, intent, answer=intent.answer, n_records=n)

    def selection_request(self, world: RetailWorld, rng: np.random.Generator, kind: str, n_constraints: int,
                          n_distractors: int, style: str = "mixed") -> Request:
        """Variant choice: colour + (size | price bound | cheapest / second cheapest), with decoys.

        ``style="price_bound"`` draws the shape of the target's own exchanges: colour + a price bound, with the
        same-colour variant above the bound listed first (``n_constraints`` must be 2)."""
        if kind not in ("exchange", "modify_items"):
            raise ValueError(f"retail-sim selection kinds are exchange, modify_items; got {kind!r}")
        if style == "price_bound" and n_constraints != 2:
            raise ValueError(f"price_bound selections have 2 constraints (colour, price bound); got {n_constraints}")
        b = world.builder
        order = b.own_order("delivered" if kind == "exchange" else "pending")
        item = order["items"][0]
        product = b.products[item["product_id"]]
        variants = product["variants"]
        color = _pick(rng, [c for c in PRODUCTS[product["name"]] if c != item["options"]["color"]])
        same = [i for i, v in variants.items() if v["options"]["color"] == color]
        if style == "price_bound":
            extra, (sibling, target) = ["max_price"], same[:2]
        else:
            n_extra = max(1, min(3, n_constraints - 1))
            extra = [str(c) for c in rng.permutation(["size", "max_price", "cheapest"])][:n_extra]
            target, sibling = (same[0], same[1]) if rng.random() < 0.5 else (same[1], same[0])
        rank = 2 if "cheapest" in extra and "size" not in extra and rng.random() < 0.5 else 1
        price = int(rng.integers(40, 110))
        bound = price + int(rng.integers(0, 15))
        delta = int(rng.integers(5, 30))
        if rank == 2:
            sib_price = price - delta
        elif "max_price" in extra:
            sib_price = bound + delta
        else:
            sib_price = price + delta
        variants[target].update(price=price, available=True)
        variants[sibling].update(price=sib_price, available=True)
        others = [i for i in variants if i not in (target, sibling)]
        others = [others[int(j)] for j in rng.permutation(len(others))]
        n_dis = int(np.clip(n_distractors, 0, len(others)))
        for j, other in enumerate(others):  # decoys: tempting prices, only the colour is wrong
            tempting = j < n_dis
            other_price = price - int(rng.integers(1, 20)) if tempting else bound + int(rng.integers(10, 40))
            variants[other].update(price=other_price, available=bool(tempting or rng.random() < 0.6))
        size = variants[target]["options"]["size"]
        words = ("second cheapest " if rank == 2 else "cheapest ") if "cheapest" in extra else ""
        article = "a" if style == "price_bound" else "the"  # the target's wording: "for a red one that costs ..."
        desc = f"{article} {words}{size + ' ' if 'size' in extra else ''}{color} one"
        bound_text = f" that costs at most {bound} dollars" if "max_price" in extra else ""
        intent = Intent(kind, order["order_id"], item_id=item["item_id"], product=item["name"],
                        product_id=item["product_id"], color=color, max_price=bound if "max_price" in extra else 0,
                        target_item_id=target, distractor_item_id=sibling)
        verb = "exchange the" if kind == "exchange" else "change the"
        intent.utterance = f"I'd like to {verb} {item['name']} in order {order['order_id']} for {desc}{bound_text}."
        constraints = ["color", *extra]
        return self._request(world, intent, target=target, decoys=[sibling, *others[:n_dis]],
                             constraints=constraints, rank=rank)

    # -- conversation ----------------------------------------------------------------------------
    def _scenario(self, world: RetailWorld, requests: list[Request]) -> Scenario:
        b = world.builder
        intents = [r.native for r in requests]
        return Scenario(
            seed=None, db=b.db, user=b.user, identify_by=world.identify_by, intents=intents,
            gold_actions=[a for r in requests for a in r.gold_actions],
            communicate=[s for r in requests for s in r.communicate],
            required_capabilities=required_capabilities(intents), original_payment=b.original,
            gift_card=b.gift_card,
        )

    def lookup_calls(self, world: RetailWorld, requests: list[Request]) -> list[tuple[str, dict[str, Any]]]:
        user = world.builder.user
        if world.identify_by == "email":
            calls = [("find_user_id_by_email", {"email": user.email})]
        else:
            calls = [("find_user_id_by_name_zip", {"first_name": user.first_name, "last_name": user.last_name,
                                                    "zip": user.zip})]
        calls.append(("get_user_details", {"user_id": user.user_id}))
        calls += [("get_order_details", {"order_id": r.entity_id}) for r in requests]
        return calls

    def make_user(self, world: RetailWorld, requests: list[Request]) -> ScriptedUser:
        return ScriptedUser(self._scenario(world, requests))

    def annotation(self, world: RetailWorld, requests: list[Request]) -> dict[str, Any]:
        return self._scenario(world, requests).annotation()

    def scripted_policy(self, knobs: dict[str, float], seed: int = 0) -> ScriptedExpert:
        return ScriptedExpert(ExpertKnobs(**knobs), seed=seed)
