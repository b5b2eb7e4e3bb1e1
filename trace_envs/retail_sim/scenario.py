"""retail-sim task generator: seed -> world DB + one to three user intents + gold + ground truth.

Every intent acts on its own order. Intent kinds and the capability each *requires* (ground truth
for diagnosis; a capability is required when the imperfect expert with that knob fails the task):

* ``cancel`` / ``return`` — eligible, or ineligible by *ownership* (another user's order: the tools
  would accept the write, only the policy forbids it -> precondition_verification) or by *status*
  (the tools refuse; no capability needed beyond reporting it);
* ``exchange`` / ``modify_items`` — choose the variant with the stated colour under a price bound;
  a pricier variant of that colour is listed first (-> structured_data_reasoning);
* ``modify_address`` — copy a full address into the write (-> tool_calling_precision);
* ``question`` — the total paid for an order of several items (-> structured_data_reasoning);
* cancel with reason "ordered by mistake" and return with refund to a gift card require exact
  arguments (-> tool_calling_precision); two or more intents require multi_step_task_completion.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trace_envs.core.kwarg_checks import number
from trace_envs.retail_sim.pools import CITIES, COUNTRY, PRODUCTS, Pools, UserIdentity, pools
from trace_envs.splits import SPLITS, split_seeds  # noqa: F401  (re-exported)

CAPABILITIES = (
    "precondition_verification",
    "structured_data_reasoning",
    "multi_step_task_completion",
    "tool_calling_precision",
)
INTENT_KINDS = ("cancel", "return", "exchange", "modify_items", "modify_address", "question")
_KIND_PROBS = (0.24, 0.2, 0.16, 0.1, 0.12, 0.18)
_N_INTENT_PROBS = (0.45, 0.35, 0.2)

@dataclass
class Intent:
    kind: str
    order_id: str
    eligible: bool = True
    ineligible_reason: str = ""  # "ownership" | "status" | ""
    item_id: str = ""
    product: str = ""
    product_id: str = ""
    reason: str = ""  # cancel reason
    refund_to_gift_card: bool = False
    color: str = ""
    max_price: int = 0
    target_item_id: str = ""
    distractor_item_id: str = ""
    address: dict[str, str] = field(default_factory=dict)
    answer: str = ""
    utterance: str = ""


@dataclass
class Scenario:
    seed: int | None
    db: dict[str, Any]
    user: UserIdentity
    identify_by: str  # "email" | "name_zip"
    intents: list[Intent]
    gold_actions: list[tuple[str, dict[str, Any]]]
    communicate: list[str]
    required_capabilities: list[str]
    original_payment: str
    gift_card: str | None

    def annotation(self) -> dict[str, Any]:
        """The task's ground truth, as exposed in ``info['task']`` (JSON-serialisable)."""
        return {
            "domain": "retail-sim",
            "user_id": self.user.user_id,
            "identity": {"email": self.user.email, "first_name": self.user.first_name,
                         "last_name": self.user.last_name, "zip": self.user.zip},
            "identify_by": self.identify_by,
            "intents": [asdict(i) for i in self.intents],
            # copies: a caller editing the reset info must not edit the gold the episode is scored against
            "gold_actions": [[name, copy.deepcopy(args)] for name, args in self.gold_actions],
            "communicate": list(self.communicate),
            "required_capabilities": list(self.required_capabilities),
            "original_payment": self.original_payment,
            "gift_card": self.gift_card,
        }


def random_address(rng: np.random.Generator, p: Pools, zip_code: str | None = None) -> dict[str, str]:
    city, state = CITIES[int(rng.integers(len(CITIES)))]
    return {
        "address1": p.address_lines[int(rng.integers(len(p.address_lines)))],
        "address2": p.suites[int(rng.integers(len(p.suites)))],
        "city": city, "state": state, "country": COUNTRY,
        "zip": zip_code or p.zips[int(rng.integers(len(p.zips)))],
    }


class WorldBuilder:
    """Builds one world's DB while intents are being drawn."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.p = pools()
        user_idx = rng.choice(len(self.p.users), size=2, replace=False)
        self.user, self.other = (self.p.users[int(i)] for i in user_idx)
        self.order_ids = [self.p.order_ids[int(i)] for i in rng.permutation(len(self.p.order_ids))[:8]]
        self.products = self._products()
        self.db: dict[str, Any] = {"users": {}, "orders": {}, "products": self.products}
        self._choices: dict[tuple[str, str], tuple[str, int, str, str]] = {}
        pay_idx = rng.integers(0, len(self.p.credit_cards), size=3)
        self.original = (self.p.credit_cards if rng.random() < 0.6 else self.p.paypals)[int(pay_idx[0])]
        self.gift_card = self.p.gift_cards[int(pay_idx[1])] if rng.random() < 0.5 else None
        self.other_payment = self.p.credit_cards[int(pay_idx[2])]
        for identity, payments in ((self.user, [self.original]), (self.other, [self.other_payment])):
            self._add_user(identity, payments)
        if self.gift_card:
            self.ensure_gift_card()

    def _products(self) -> dict[str, Any]:
        products = {}
        for name in PRODUCTS:
            variants = {}
            for v in (v for v in self.p.variants if v.product == name):
                variants[v.item_id] = {
                    "options": {"color": v.color, "size": v.size},
                    "price": int(self.rng.integers(15, 150)),
                    "available": bool(self.rng.random() < 0.8),
                }
            pid = self.p.product_ids[name]
            products[pid] = {"product_id": pid, "name": name, "variants": variants}
        return products

    def _add_user(self, identity: UserIdentity, payments: list[str]) -> None:
        methods = {}
        for pm in payments:
            methods[pm] = {"source": pm.rsplit("_", 1)[0]}
        self.db["users"][identity.user_id] = {
            "user_id": identity.user_id,
            "name": {"first_name": identity.first_name, "last_name": identity.last_name},
            "email": identity.email,
            "address": random_address(self.rng, self.p, identity.zip),
            "payment_methods": methods,
            "orders": [],
        }

    def ensure_gift_card(self) -> str:
        """The user's gift card, added to their payment methods if missing. It takes draws from the rng: the card
        when the user has none yet, and the balance on every call (``setdefault`` evaluates it even for a card on
        file), so a task that calls it draws differently from then on than one that does not."""
        if self.gift_card is None:
            self.gift_card = self.p.gift_cards[int(self.rng.integers(len(self.p.gift_cards)))]
        methods = self.db["users"][self.user.user_id]["payment_methods"]
        methods.setdefault(self.gift_card, {"source": "gift_card", "balance": int(self.rng.integers(20, 200))})
        return self.gift_card

    def add_order(self, owner: UserIdentity, status: str, n_items: int, payment: str) -> dict[str, Any]:
        order_id = self.order_ids.pop()
        names = list(PRODUCTS)
        chosen = self.rng.choice(len(names), size=n_items, replace=False)
        items = []
        for idx in chosen:
            pid = self.p.product_ids[names[int(idx)]]
            item_id = list(self.products[pid]["variants"])[int(self.rng.integers(6))]
            variant = self.products[pid]["variants"][item_id]
            items.append({"item_id": item_id, "product_id": pid, "name": names[int(idx)],
                          "options": dict(variant["options"]), "price": int(self.rng.integers(15, 150))})
        order = {
            "order_id": order_id, "user_id": owner.user_id, "status": status, "items": items,
            "address": dict(self.db["users"][owner.user_id]["address"]),
            "payment_history": [{"transaction_type": "payment", "amount": sum(i["price"] for i in items),
                                 "payment_method_id": payment}],
        }
        self.db["orders"][order_id] = order
        self.db["users"][owner.user_id]["orders"].append(order_id)
        return order

    def own_order(self, status: str, n_items: int = 0) -> dict[str, Any]:
        n = n_items or int(self.rng.integers(1, 4))
        return self.add_order(self.user, status, n, self.original)

    def set_variant_choice(self, item: dict[str, Any]) -> tuple[str, int, str, str]:
        """Make a colour + price-bound choice with one right answer and a pricier decoy listed first."""
        product = self.products[item["product_id"]]
        colors = [c for c in PRODUCTS[product["name"]] if c != item["options"]["color"]]
        color = colors[int(self.rng.integers(len(colors)))]
        key = (item["product_id"], color)
        if key not in self._choices:  # one choice per (product, colour): intents must not re-price it
            ids = [i for i, v in product["variants"].items() if v["options"]["color"] == color]
            decoy, target = ids[0], ids[1]  # listed in size order: small first
            bound = int(self.rng.integers(30, 120))
            product["variants"][decoy].update(price=bound + int(self.rng.integers(5, 30)), available=True)
            product["variants"][target].update(price=bound - int(self.rng.integers(1, 15)), available=True)
            self._choices[key] = (color, bound, target, decoy)
        return self._choices[key]


REASON_PHRASES = {"no longer needed": "I no longer need it", "ordered by mistake": "I ordered it by mistake"}


def address_change_intent(b: WorldBuilder, rng: np.random.Generator) -> Intent:
    """Ship a pending order of the user to a new address (every field must be copied exactly)."""
    order = b.own_order("pending")
    address = random_address(rng, b.p)
    while address == order["address"]:
        address = random_address(rng, b.p)
    intent = Intent("modify_address", order["order_id"], address=address)
    intent.utterance = (f"Please ship order {order['order_id']} to {address['address1']}, "
                        f"{address['address2']}, {address['city']}, {address['state']}, {address['zip']}.")
    return intent


def _draw_intent(b: WorldBuilder, kind: str, gift_card_rate: float = 0.5) -> Intent:
    rng = b.rng
    if kind in ("cancel", "return"):
        good_status = "pending" if kind == "cancel" else "delivered"
        roll = rng.random()
        if roll < 0.5:
            order, intent = b.own_order(good_status), Intent(kind, "")
        elif roll < 0.8:
            order = b.add_order(b.other, good_status, int(rng.integers(1, 3)), b.other_payment)
            intent = Intent(kind, "", eligible=False, ineligible_reason="ownership")
        else:
            bad = ("delivered", "processed") if kind == "cancel" else ("pending", "processed")
            order = b.own_order(bad[int(rng.integers(2))])
            intent = Intent(kind, "", eligible=False, ineligible_reason="status")
        intent.order_id = order["order_id"]
        item = order["items"][0]
        intent.item_id, intent.product, intent.product_id = item["item_id"], item["name"], item["product_id"]
        if kind == "cancel":
            intent.reason = ("no longer needed", "ordered by mistake")[int(rng.integers(2))]
            intent.utterance = f"Please cancel my order {intent.order_id}, {REASON_PHRASES[intent.reason]}."
        else:
            intent.refund_to_gift_card = bool(intent.eligible and rng.random() < gift_card_rate)
            if intent.refund_to_gift_card:
                b.ensure_gift_card()
            refund = " and get the refund on my gift card" if intent.refund_to_gift_card else ""
            intent.utterance = f"I want to return the {intent.product} from order {intent.order_id}{refund}."
        return intent
    if kind in ("exchange", "modify_items"):
        order = b.own_order("delivered" if kind == "exchange" else "pending")
        item = order["items"][0]
        color, bound, target, decoy = b.set_variant_choice(item)
        intent = Intent(kind, order["order_id"], item_id=item["item_id"], product=item["name"],
                        product_id=item["product_id"], color=color, max_price=bound,
                        target_item_id=target, distractor_item_id=decoy)
        verb = "exchange the" if kind == "exchange" else "change the"
        intent.utterance = (f"I'd like to {verb} {item['name']} in order {order['order_id']} "
                            f"for a {color} one that costs at most {bound} dollars.")
        return intent
    if kind == "modify_address":
        return address_change_intent(b, rng)
    if kind == "question":
        statuses = ("pending", "delivered", "processed")
        order = b.own_order(statuses[int(rng.integers(3))], n_items=int(rng.integers(2, 4)))
        total = sum(i["price"] for i in order["items"])
        intent = Intent(kind, order["order_id"], answer=f"${round(total, 2)}")
        intent.utterance = f"How much did I pay in total for the items in order {order['order_id']}?"
        return intent
    raise ValueError(f"unknown intent kind {kind!r}")


def gold_action(intent: Intent, b: WorldBuilder) -> tuple[str, dict[str, Any]] | None:
    if not intent.eligible:
        return None
    if intent.kind == "cancel":
        return "cancel_pending_order", {"order_id": intent.order_id, "reason": intent.reason}
    if intent.kind == "return":
        method = b.gift_card if intent.refund_to_gift_card else b.original
        return "return_delivered_order_items", {"order_id": intent.order_id, "item_ids": [intent.item_id],
                                                "payment_method_id": method}
    if intent.kind in ("exchange", "modify_items"):
        tool = "exchange_delivered_order_items" if intent.kind == "exchange" else "modify_pending_order_items"
        return tool, {"order_id": intent.order_id, "item_ids": [intent.item_id],
                      "new_item_ids": [intent.target_item_id], "payment_method_id": b.original}
    if intent.kind == "modify_address":
        return "modify_pending_order_address", {"order_id": intent.order_id, **intent.address}
    return None


def required_capabilities(intents: list[Intent]) -> list[str]:
    """Ground truth: the capabilities whose absence makes the imperfect expert fail this task."""
    need: set[str] = set()
    for i in intents:
        if i.ineligible_reason == "ownership":
            need.add("precondition_verification")
        if i.eligible and i.kind in ("exchange", "modify_items", "question"):
            need.add("structured_data_reasoning")
        if i.eligible and (
            (i.kind == "cancel" and i.reason == "ordered by mistake")
            or (i.kind == "return" and i.refund_to_gift_card)
            or i.kind == "modify_address"
        ):
            need.add("tool_calling_precision")
    if len(intents) >= 2:
        need.add("multi_step_task_completion")
    return [c for c in CAPABILITIES if c in need]


def check_gift_card_rate(rate: float) -> None:
    """``gift_card_rate`` is a share: in [0, 1]."""
    number("gift_card_rate", rate)


def generate_scenario(rng: np.random.Generator, seed: int | None = None, n_intents: int | None = None,
                      kinds: list[str] | None = None, gift_card_rate: float = 0.5) -> Scenario:
    """Draw one task from ``rng`` (the env's ``np_random``). ``gift_card_rate``: the share of eligible returns whose
    user asks for the refund on a gift card (0.5 is the target's own mix). Each eligible return draws one uniform u
    and asks iff u < rate, but a return that asks then draws the gift card and its balance
    (:meth:`WorldBuilder.ensure_gift_card`), so two rates draw the same task only up to the first eligible return
    they decide differently: from there on its later requests, the filler order and the identity mode
    (``identify_by``) can differ. A task with one return keeps its request (order, item, eligibility) at any rate."""
    check_gift_card_rate(gift_card_rate)
    b = WorldBuilder(rng)
    n = n_intents or int(rng.choice(len(_N_INTENT_PROBS), p=_N_INTENT_PROBS)) + 1
    chosen = kinds or [INTENT_KINDS[int(rng.choice(len(INTENT_KINDS), p=_KIND_PROBS))] for _ in range(n)]
    intents = [_draw_intent(b, kind, gift_card_rate) for kind in chosen]
    # A filler order so the user's order list is not just the task's orders.
    if rng.random() < 0.5:
        b.own_order(("pending", "delivered", "cancelled")[int(rng.integers(3))])
    gold = [a for a in (gold_action(i, b) for i in intents) if a is not None]
    communicate = [i.answer if i.kind == "question" else i.order_id for i in intents
                   if i.kind == "question" or not i.eligible]
    return Scenario(
        seed=seed, db=b.db, user=b.user, identify_by="email" if rng.random() < 0.7 else "name_zip",
        intents=intents, gold_actions=gold, communicate=communicate,
        required_capabilities=required_capabilities(intents), original_payment=b.original, gift_card=b.gift_card,
    )
