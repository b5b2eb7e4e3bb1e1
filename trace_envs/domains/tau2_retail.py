"""τ²-Bench retail as a family domain (``domain="tau2-retail"``), over the real tau2 package.

Worlds are tau2's retail DB; the acting user, their orders, products and variants are drawn from it. The
users (and so the orders) are split into a train and a test pool (``trace_envs.splits.pool_split``): a seed's
requests draw only on its own split's users. ``n_records`` is the exact number of items of the order a question
is about (2-5, the DB's range); ``n_distractors`` is not varied: a selection's decoys are the product's own
variants that share its first stated option.
Precondition cases come from tau2's retail policy: cancel needs a *pending* order and return a
*delivered* one (``status``, enforced by tau2's tools), the order must be the authenticated user's
(``ownership``, policy only), and the user must be authenticated by email or name + zip first
(``authentication``: the user gives an email or zip code that tau2's lookup does not find).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.domains.base import Request
from trace_envs.domains.errors import DrawFailed
from trace_envs.domains.retail_sim import retail_request_kinds, retail_scoring_gold
from trace_envs.domains.tau2_common import (
    AUTH_WORDS,
    OWNERSHIP_WORDS,
    Tau2FamilyDomain,
    Tau2FamilyWorld,
    pick,
    pool_of,
    raw,
    split_pools,
)
from trace_envs.splits import pool_split

REASON_PHRASES = {"no longer needed": "I no longer need it", "ordered by mistake": "I ordered it by mistake"}
_GOOD = {"cancel": ("pending",), "return": ("delivered",), "exchange": ("delivered",), "modify_items": ("pending",),
         "modify_address": ("pending",)}
_BAD = {"cancel": ("processed", "delivered", "cancelled"), "return": ("pending", "processed", "cancelled")}
_VERB = {"cancel": "cancel", "return": "return", "exchange": "exchange", "modify_items": "modify",
         "modify_address": "modify"}
_DONE = {"cancel": "Order {oid} is cancelled.", "return": "The return for order {oid} is requested.",
         "exchange": "The exchange for order {oid} is requested.", "modify_items": "Order {oid} is modified.",
         "modify_address": "The address of order {oid} is updated."}


class Tau2RetailDomain(Tau2FamilyDomain):
    name = "tau2-retail"
    tau2_domain = "retail"
    entity_collection = "orders"
    guard_cases = ("allow", "ownership", "status", "authentication")
    fixed_settings = {"n_distractors": None}

    def __init__(self) -> None:
        super().__init__()
        from trace_envs.tau2.runtime import pristine_db

        db = pristine_db("retail")
        self._users = split_pools(sorted(u for u, rec in db.users.items() if rec.orders))
        self._orders_by_status: dict[str, dict[str, list[str]]] = {name: {} for name in self._users}
        for oid, order in sorted(db.orders.items()):
            statuses = self._orders_by_status[pool_split(order.user_id)]
            statuses.setdefault(order.status, []).append(oid)
        most = min(max(len(db.orders[o].items) for u in users for o in db.users[u].orders if o in db.orders)
                   for users in self._users.values())
        self.setting_ranges = {"n_records": (2, most)}

    def scoring_gold(self, requests: list[Request], writes: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """An exchange or item change the user named no payment method for: any method tau2's tools accept."""
        return retail_scoring_gold(requests, writes)

    # -- world -----------------------------------------------------------------------------------
    def new_world(self, rng: np.random.Generator, split: str = "train") -> Tau2FamilyWorld:
        from trace_envs.tau2.runtime import fresh_db

        db = fresh_db("retail")
        user = raw(db.users, pick(rng, pool_of(self._users, split)))
        if rng.random() < 0.7:
            identity = {"email": user.email}
            identify = ("find_user_id_by_email", {"email": user.email})
        else:
            identity = {"first_name": user.name.first_name, "last_name": user.name.last_name,
                        "zip": user.address.zip}
            identify = ("find_user_id_by_name_zip", dict(identity))
        return Tau2FamilyWorld(db=db, user_id=user.user_id, identity=identity, identify=identify, split=split)

    def identity_sentence(self, identity: dict[str, str]) -> str:
        if "email" in identity:
            return f"My email is {identity['email']}."
        return f"I am {identity['first_name']} {identity['last_name']}, zip code {identity['zip']}."

    def _own_orders(self, world: Tau2FamilyWorld, statuses: tuple[str, ...]) -> list[str]:
        user = raw(world.db.users, world.user_id)
        return [o for o in user.orders if o in world.db.orders and o not in world.used
                and raw(world.db.orders, o).status in statuses]

    def _order(self, world: Tau2FamilyWorld, oid: str) -> Any:
        return raw(world.db.orders, oid)

    # -- specs -----------------------------------------------------------------------------------
    def _spec(self, kind: str, oid: str, utterance: str, write: tuple[str, dict[str, Any]] | None, confirm: str,
              **extra: Any) -> dict[str, Any]:
        spec = {"kind": kind, "entity_id": oid, "utterance": utterance,
                "lookup": ["get_order_details", {"order_id": oid}], "reads": [],
                "write": [write[0], write[1]] if write else None, "sloppy": None, "wrong": None,
                "confirm": confirm, "done": _DONE.get(kind, "").format(oid=oid)}
        spec.update(extra)
        return spec

    def _cancel(self, oid: str, reason: str) -> dict[str, Any]:
        return self._spec("cancel", oid, f"Please cancel my order {oid}, {REASON_PHRASES[reason]}.",
                          ("cancel_pending_order", {"order_id": oid, "reason": reason}),
                          f"cancel order {oid} because the item is {reason}", facts={"reason": reason})

    def _return(self, world: Tau2FamilyWorld, oid: str, refund: str | None) -> dict[str, Any]:
        order = self._order(world, oid)
        item = order.items[0]
        method = refund or order.payment_history[0].payment_method_id
        text = f" and get the refund on my gift card {refund}" if refund else ""
        return self._spec("return", oid, f"I want to return the {item.name} from order {oid}{text}.",
                          ("return_delivered_order_items", {"order_id": oid, "item_ids": [item.item_id],
                                                            "payment_method_id": method}),
                          f"return the {item.name} of order {oid} with refund to {method}")

    def guarded_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str, case: str) -> Request:
        if kind not in _BAD:
            raise ValueError(f"tau2-retail guarded kinds are {sorted(_BAD)}, got {kind!r}")
        if case not in self.guard_cases:
            raise ValueError(f"tau2-retail supports guard cases {self.guard_cases}, got {case!r}")
        words: tuple[str, ...] = ()
        if case == "ownership":
            mine = set(raw(world.db.users, world.user_id).orders)
            by_status = self._orders_by_status[world.split]
            pool = [o for s in _GOOD[kind] for o in by_status.get(s, []) if o not in mine]
            oid = pick(rng, pool)
            words = OWNERSHIP_WORDS
        else:
            oid = pick(rng, self._own_orders(world, _BAD[kind] if case == "status" else _GOOD[kind]))
        if case == "status":
            words = (self._order(world, oid).status,)
        if case == "authentication":
            words = AUTH_WORDS
            self._break_identity(world, rng)
        spec = self._cancel(oid, "no longer needed") if kind == "cancel" else self._return(world, oid, None)
        if case == "allow":
            self.require_gold(world, [tuple(spec["write"])])
        return self.make_request(world, spec, case=case, reason_words=words, communicate=[] if case == "allow"
                                 else [oid])

    def _break_identity(self, world: Tau2FamilyWorld, rng: np.random.Generator) -> None:
        """The user misstates their email / zip so tau2's lookup fails (checked against the DB)."""
        identity = dict(world.identity)
        if "email" in identity:
            local, _, host = identity["email"].partition("@")
            identity["email"] = f"{local}{int(rng.integers(10, 99))}@{host}"
            identify = ("find_user_id_by_email", {"email": identity["email"]})
        else:
            identity["zip"] = f"{(int(identity['zip']) + int(rng.integers(1, 500))) % 100000:05d}"
            identify = ("find_user_id_by_name_zip", dict(identity))
        if not self.build_tools(self.snapshot(world.db)).call(*identify).error:
            raise DrawFailed("the misstated identity exists in the DB")
        world.identity, world.identify = identity, identify

    def plain_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str) -> Request:
        return self.guarded_request(world, rng, kind, "allow")

    def exact_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str) -> Request:
        if kind == "cancel":
            spec = self._cancel(pick(rng, self._own_orders(world, ("pending",))), "ordered by mistake")
            spec["sloppy"] = ["cancel_pending_order", {"order_id": spec["entity_id"], "reason": "no longer needed"}]
        elif kind == "return":
            user = raw(world.db.users, world.user_id)
            cards = sorted(p for p, m in user.payment_methods.items() if m.source == "gift_card")
            oids = [o for o in self._own_orders(world, ("delivered",))
                    if self._order(world, o).payment_history[0].payment_method_id not in cards]
            oid, card = pick(rng, oids), pick(rng, cards)
            spec = self._return(world, oid, card)
            sloppy = self._return(world, oid, None)["write"]
            spec["sloppy"] = sloppy
        elif kind == "modify_address":
            oid = pick(rng, self._own_orders(world, ("pending",)))
            other = raw(world.db.users, pick(rng, [u for u in self._users[world.split] if u != world.user_id]))
            address = other.address.model_dump()
            if not address.get("address2"):
                raise DrawFailed("the drawn address has no second line")
            text = ", ".join(address[k] for k in ("address1", "address2", "city", "state", "zip"))
            spec = self._spec("modify_address", oid, f"Please ship order {oid} to {text}, {address['country']}.",
                              ("modify_pending_order_address", {"order_id": oid, **address}),
                              f"ship order {oid} to {text}", address=address)
            spec["sloppy"] = ["modify_pending_order_address", {"order_id": oid, **address, "address2": ""}]
        else:
            raise ValueError(f"tau2-retail exact kinds are {self.kinds('exact')}, got {kind!r}")
        self.require_gold(world, [tuple(spec["write"])])
        return self.make_request(world, spec, communicate=[])

    def apply_correction(self, world: Tau2FamilyWorld, rng: np.random.Generator, request: Request) -> str:
        spec = self.spec(request)
        oid = spec["entity_id"]
        if spec["kind"] == "cancel":
            first = f"Please cancel my order {oid}, {REASON_PHRASES['no longer needed']}."
            fix = f"Sorry, to be precise: {REASON_PHRASES['ordered by mistake']}."
        elif spec["kind"] == "return":
            item = self._order(world, oid).items[0]
            card = spec["write"][1]["payment_method_id"]
            first = f"I want to return the {item.name} from order {oid}."
            fix = f"Actually, please put the refund on my gift card {card}."
        else:
            address = spec["address"]
            wrong = f"Suite {int(rng.integers(100, 999))}"
            while wrong == address["address2"]:
                wrong = f"Suite {int(rng.integers(100, 999))}"
            first = (f"Please ship order {oid} to {address['address1']}, {wrong}, {address['city']}, "
                     f"{address['state']}, {address['zip']}, {address['country']}.")
            fix = f"Sorry, I gave the wrong suite: it is {address['address2']}."
        spec["utterance"] = request.utterance = first
        return fix

    def question_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, n_records: int) -> Request:
        statuses = ("pending", "processed", "delivered", "cancelled")
        pool = [o for o in self._own_orders(world, statuses) if len(self._order(world, o).items) == n_records]
        oid = pick(rng, pool)  # none: DrawFailed, the family draws another world
        prices = [item.price for item in self._order(world, oid).items]
        answer = f"${round(float(sum(prices)), 2)}"
        spec = self._spec("question", oid, f"How much did I pay in total for the items in order {oid}?", None, "",
                          answer_template=f"You paid ${{answer}} for the items in order {oid}.")
        return self.make_request(world, spec, communicate=[answer], answer=answer, n_records=len(prices))

    def selection_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str, n_constraints: int,
                          n_distractors: int | None = None, style: str = "mixed") -> Request:
        """Exchange / modify one item for the variant that exactly ``n_constraints`` stated options single out;
        the decoys are the other variants sharing the first one (``n_distractors`` is not varied here)."""
        if kind not in ("exchange", "modify_items"):
            raise ValueError(f"tau2-retail selection kinds are exchange, modify_items; got {kind!r}")
        oid = pick(rng, self._own_orders(world, _GOOD[kind]))
        order = self._order(world, oid)
        item = pick(rng, order.items)
        product = raw(world.db.products, item.product_id)
        candidates = sorted(v for v, var in product.variants.items() if var.available and v != item.item_id)
        if len(candidates) < 2:
            raise DrawFailed("too few available variants")
        target = pick(rng, candidates)
        options = product.variants[target].options
        keys = [str(k) for k in rng.permutation(sorted(options))]
        chosen: list[str] = []
        matching = list(candidates)
        for key in keys:
            if len(matching) == 1 and len(chosen) >= n_constraints:
                break
            chosen.append(key)
            matching = [v for v in matching if product.variants[v].options.get(key) == options[key]]
        if matching != [target] or len(chosen) != n_constraints:
            raise DrawFailed(f"no {n_constraints} options single out the target variant")
        first = chosen[0]
        decoys = [v for v in candidates if v != target and product.variants[v].options.get(first) == options[first]]
        decoys = decoys or [v for v in candidates if v != target]
        decoys = [decoys[int(j)] for j in rng.permutation(len(decoys))]
        wrong = decoys[0]
        desc = ", ".join(f"{k} {options[k]}" for k in chosen)
        tool = "exchange_delivered_order_items" if kind == "exchange" else "modify_pending_order_items"
        method = order.payment_history[0].payment_method_id
        args = {"order_id": oid, "item_ids": [item.item_id], "new_item_ids": [target], "payment_method_id": method}
        verb = "exchange the" if kind == "exchange" else "change the"
        spec = self._spec(kind, oid, f"I'd like to {verb} {item.name} in order {oid} for the one with {desc}.",
                          (tool, args), f"swap the {item.name} of order {oid} for item {target}",
                          reads=[["get_product_details", {"product_id": item.product_id}]])
        spec["wrong"] = [tool, {**args, "new_item_ids": [wrong]}]
        self.require_gold(world, [tuple(spec["write"])])
        return self.make_request(world, spec, target=target, decoys=decoys, constraints=chosen,
                                 item_id=item.item_id, product_id=item.product_id)

    # -- policy checks on looked-up records ------------------------------------------------------
    def kinds(self, purpose: str) -> tuple[str, ...]:
        return retail_request_kinds(purpose)

    def refusal(self, spec: dict[str, Any], record: dict[str, Any], user_id: str) -> str:
        oid, kind = spec["entity_id"], spec["kind"]
        if record.get("user_id") != user_id:
            return f"I cannot change order {oid}: it is not your order."
        if record.get("status") not in _GOOD[kind]:
            return f"I cannot {_VERB[kind]} order {oid}: it is {record.get('status')}."
        return ""

    def question_values(self, spec: dict[str, Any], record: dict[str, Any]) -> list[float]:
        return [item["price"] for item in record.get("items", [])]
