"""τ²-Bench airline as a family domain (``domain="tau2-airline"``), over the real tau2 package.

Worlds are tau2's airline DB; the acting user and their reservations come from it (only trips not yet
flown, so the policy's "already flown: transfer" rule never applies). Precondition cases come from
tau2's airline policy, none of which the tools enforce: a cancellation needs a booking made within
24 h, a business cabin, or travel insurance with a covered reason (``policy``); checked bags can be
added but not removed (``policy``); basic economy flights cannot be modified (``policy``: the user asks
to move a trip's flights to later dates, which tau2's ``update_reservation_flights`` accepts for any
cabin); the reservation must be the user's (``ownership``). ``details['rule']`` names the policy rule.

No refusal case is enforced by the tools, so ``unenforced_share`` is 1.0 on every task; ``n_distractors`` is not
varied (a selection's decoys are the user's own other reservations); ``n_records`` is the exact number of flights
of the reservation a question is about (2-4). The users (and so the reservations) are split into a train and a
test pool (``trace_envs.splits.pool_split``): a seed's requests draw only on its own split's users.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.domains.base import Request
from trace_envs.domains.errors import DrawFailed
from trace_envs.domains.tau2_common import (
    OWNERSHIP_WORDS,
    Tau2FamilyDomain,
    Tau2FamilyWorld,
    pick,
    pool_of,
    raw,
    split_pools,
)
from trace_envs.splits import pool_split

NOW_DATE = "2024-05-15"  # the policy's current time is 2024-05-15 15:00 EST
RECENT = "2024-05-14T15:00:00"  # booked within the last 24 h
REASONS = {"change of plan": "my plans changed", "health": "I am sick and cannot travel",
           "weather": "a storm is forecast at my destination"}
COVERED = ("health", "weather")
FREE_BAGS = {"regular": {"basic_economy": 0, "economy": 1, "business": 2},
             "silver": {"basic_economy": 1, "economy": 2, "business": 3},
             "gold": {"basic_economy": 2, "economy": 3, "business": 4}}
POLICY_WORDS = ("24 hours", "insurance", "business", "not removed", "basic economy")
LAST_DATE = "2024-05-30"  # the last flight date in tau2's airline DB
RULES = {"cancel": "cancellation", "bags": "baggage", "change_flight": "basic_economy"}


def cancellable(reservation: dict[str, Any], reason: str) -> bool:
    """The policy's cancellation rule (trip not flown): recent booking, business, or covered insurance."""
    return (reservation.get("cabin") == "business" or str(reservation.get("created_at", "")) >= RECENT
            or (reservation.get("insurance") == "yes" and reason in COVERED))


class Tau2AirlineDomain(Tau2FamilyDomain):
    name = "tau2-airline"
    tau2_domain = "airline"
    entity_collection = "reservations"
    guard_cases = ("allow", "ownership", "policy")
    fixed_settings = {"n_distractors": None, "unenforced_share": 1.0}

    def __init__(self) -> None:
        super().__init__()
        from trace_envs.tau2.runtime import pristine_db

        db = pristine_db("airline")
        self._future = sorted(r for r, res in db.reservations.items()
                              if res.status is None and all(f.date > NOW_DATE for f in res.flights))
        future = set(self._future)
        self._users = split_pools(sorted(u for u, rec in db.users.items()
                                         if any(r in future for r in rec.reservations)))
        most = min(max(len(db.reservations[r].flights) for u in users for r in db.users[u].reservations
                       if r in db.reservations) for users in self._users.values())
        self.setting_ranges = {"n_records": (2, most)}

    # -- world -----------------------------------------------------------------------------------
    def new_world(self, rng: np.random.Generator, split: str = "train") -> Tau2FamilyWorld:
        from trace_envs.tau2.runtime import fresh_db

        user_id = pick(rng, pool_of(self._users, split))
        return Tau2FamilyWorld(db=fresh_db("airline"), user_id=user_id, identity={"user_id": user_id},
                               identify=("get_user_details", {"user_id": user_id}), split=split)

    def identity_sentence(self, identity: dict[str, str]) -> str:
        return f"My user id is {identity['user_id']}."

    def _res(self, world: Tau2FamilyWorld, rid: str) -> Any:
        return raw(world.db.reservations, rid)

    def _own(self, world: Tau2FamilyWorld, future: bool = True) -> list[str]:
        pool = set(self._future) if future else set(dict.keys(world.db.reservations))
        return [r for r in raw(world.db.users, world.user_id).reservations if r in pool and r not in world.used]

    def _others(self, world: Tau2FamilyWorld) -> list[str]:
        """Other users' open reservations, of users in the world's split."""
        mine = set(raw(world.db.users, world.user_id).reservations)
        return [r for r in self._future if r not in mine
                and pool_split(self._res(world, r).user_id) == world.split]

    def _payments(self, world: Tau2FamilyWorld) -> list[str]:
        """The user's payment methods an update may use (no certificates), in profile order."""
        methods = raw(world.db.users, world.user_id).payment_methods
        return [p for p, m in methods.items() if m.source in ("credit_card", "gift_card")]

    # -- specs -----------------------------------------------------------------------------------
    def _spec(self, kind: str, rid: str, utterance: str, write: tuple[str, dict[str, Any]] | None, confirm: str,
              done: str, **extra: Any) -> dict[str, Any]:
        spec = {"kind": kind, "entity_id": rid, "utterance": utterance,
                "lookup": ["get_reservation_details", {"reservation_id": rid}], "reads": [],
                "write": [write[0], write[1]] if write else None, "sloppy": None, "wrong": None,
                "confirm": confirm, "done": done}
        spec.update(extra)
        return spec

    def _cancel(self, rid: str, reason: str) -> dict[str, Any]:
        return self._spec("cancel", rid, f"Please cancel my reservation {rid}, {REASONS[reason]}.",
                          ("cancel_reservation", {"reservation_id": rid}), f"cancel the whole reservation {rid}",
                          f"Reservation {rid} is cancelled.", facts={"reason": reason})

    def _bags_args(self, world: Tau2FamilyWorld, rid: str, delta: int, payment: str) -> dict[str, Any]:
        res = self._res(world, rid)
        owner = raw(world.db.users, res.user_id)
        total = res.total_baggages + delta
        free = FREE_BAGS[owner.membership][res.cabin] * len(res.passengers)
        nonfree = max(0, total - free) if delta > 0 else max(0, res.nonfree_baggages + delta)
        return {"reservation_id": rid, "total_baggages": total, "nonfree_baggages": max(nonfree, 0),
                "payment_id": payment}

    def _bags(self, world: Tau2FamilyWorld, rid: str, delta: int, payment: str, phrase: str = "") -> dict[str, Any]:
        args = self._bags_args(world, rid, delta, payment)
        n = abs(delta)
        bags = f"{n} checked bag{'s' if n > 1 else ''}"
        where = phrase or f"reservation {rid}"
        verb = f"add {bags} to" if delta > 0 else f"remove {bags} from"
        return self._spec("bags", rid, f"Please {verb} {where}, paid with {payment}.",
                          ("update_reservation_baggages", args),
                          f"set reservation {rid} to {args['total_baggages']} checked bags "
                          f"({args['nonfree_baggages']} paid) charged to {payment}",
                          f"The baggage of reservation {rid} is updated.", facts={"total": args["total_baggages"]})

    def _shifted(self, world: Tau2FamilyWorld, rid: str) -> tuple[int, list[dict[str, str]]] | None:
        """The reservation's flights 1 or 2 days later, every one available with seats in its cabin."""
        from datetime import date, timedelta

        res = self._res(world, rid)
        for days in (1, 2):
            new = [{"flight_number": f.flight_number,
                    "date": (date.fromisoformat(f.date) + timedelta(days=days)).isoformat()} for f in res.flights]
            if all(self._seats(world, f["flight_number"], f["date"], res.cabin) >= len(res.passengers) for f in new):
                return days, new
        return None

    @staticmethod
    def _seats(world: Tau2FamilyWorld, number: str, day: str, cabin: str) -> int:
        if day > LAST_DATE:
            return 0
        instance = raw(world.db.flights, number).dates.get(day)
        if instance is None or getattr(instance, "status", "") != "available":
            return 0
        return int(instance.available_seats.get(cabin, 0))

    def _change(self, world: Tau2FamilyWorld, rid: str, payment: str) -> dict[str, Any]:
        shifted = self._shifted(world, rid)
        if shifted is None:
            raise DrawFailed(f"no later available flights for reservation {rid}")
        days, new = shifted
        res = self._res(world, rid)
        when = ", ".join(f"{f['flight_number']} on {f['date']}" for f in new)
        return self._spec("change_flight", rid,
                          f"Please move my reservation {rid} {days} day{'s' if days > 1 else ''} later: the same "
                          f"flights ({when}), with any difference paid with {payment}.",
                          ("update_reservation_flights", {"reservation_id": rid, "cabin": res.cabin, "flights": new,
                                                          "payment_id": payment}),
                          f"change reservation {rid} to {when} in {res.cabin}, difference charged to {payment}",
                          f"The flights of reservation {rid} are changed.", facts={"cabin": res.cabin})

    def guarded_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str, case: str) -> Request:
        """A request of ``case`` on ``kind``, else on the other guarded kinds in turn: a world whose user
        cannot host the case on ``kind`` (no bags to remove, no basic economy trip) keeps the drawn case,
        so the case mix stays the family's ``refuse_fraction``."""
        if kind not in RULES:
            raise ValueError(f"tau2-airline guarded kinds are {sorted(RULES)}; got {kind!r}")
        if case not in self.guard_cases:
            raise ValueError(f"tau2-airline supports guard cases {self.guard_cases}, got {case!r}")
        kinds = self.kinds("guarded")
        start = kinds.index(kind)
        for other in kinds[start:] + kinds[:start]:
            try:
                return self._guarded(world, rng, other, case)
            except DrawFailed:
                continue
        raise DrawFailed(f"no guarded kind hosts the {case!r} case for user {world.user_id}")

    def _guarded(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str, case: str) -> Request:
        words: tuple[str, ...] = POLICY_WORDS if case == "policy" else OWNERSHIP_WORDS if case == "ownership" else ()
        pool = self._others(world) if case == "ownership" else self._own(world)
        payment = pick(rng, self._payments(world))
        if kind == "cancel":
            reason = str(pick(rng, sorted(REASONS)))
            want = case != "policy"
            rid = pick(rng, [r for r in pool if cancellable(self._res(world, r).model_dump(), reason) == want])
            spec = self._cancel(rid, reason)
        elif kind == "change_flight":
            want = case == "policy"
            rid = pick(rng, [r for r in pool if (self._res(world, r).cabin == "basic_economy") == want])
            spec = self._change(world, rid, payment)
        else:
            delta = -1 if case == "policy" else int(rng.integers(1, 3))
            rid = pick(rng, [r for r in pool if self._res(world, r).total_baggages + delta >= 0])
            spec = self._bags(world, rid, delta, payment)
        if case == "allow":
            self.require_gold(world, [tuple(spec["write"])])
        return self.make_request(world, spec, case=case, reason_words=words,
                                 communicate=[] if case == "allow" else [rid],
                                 **({"rule": RULES[kind]} if case == "policy" else {}))

    def plain_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str) -> Request:
        if kind not in self.kinds("plain"):
            raise ValueError(f"tau2-airline plain kinds are {self.kinds('plain')}; got {kind!r}")
        return self._guarded(world, rng, kind, "allow")

    def exact_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str) -> Request:
        rid = pick(rng, self._own(world))
        if kind == "bags":
            payments = self._payments(world)
            if len(payments) < 2:
                raise DrawFailed("the user has a single usable payment method")
            stated = pick(rng, payments[1:])
            spec = self._bags(world, rid, int(rng.integers(1, 3)), stated)
            if spec["write"][1]["nonfree_baggages"] <= self._res(world, rid).nonfree_baggages:
                raise DrawFailed("the added bags are free: the payment method would not show in the DB")
            spec["sloppy"] = [spec["write"][0], {**spec["write"][1], "payment_id": payments[0]}]
            spec["facts"]["default_payment"] = payments[0]
        elif kind == "passenger":
            res = self._res(world, rid)
            passengers = [p.model_dump() for p in res.passengers]
            j = int(rng.integers(len(passengers)))
            month, day = (int(x) for x in rng.choice(np.arange(1, 13), size=2, replace=False))
            dob = f"{int(rng.integers(1950, 2006))}-{month:02d}-{day:02d}"
            if dob == passengers[j]["dob"]:
                raise DrawFailed("the new date of birth equals the old one")
            new = [dict(p) for p in passengers]
            new[j]["dob"] = dob
            swapped = [dict(p) for p in passengers]
            swapped[j]["dob"] = f"{dob[:4]}-{day:02d}-{month:02d}"
            who = f"{passengers[j]['first_name']} {passengers[j]['last_name']}"
            spec = self._spec("passenger", rid,
                              f"Please correct the date of birth of passenger {who} on reservation {rid} to {dob}.",
                              ("update_reservation_passengers", {"reservation_id": rid, "passengers": new}),
                              f"set the date of birth of {who} on reservation {rid} to {dob}",
                              f"The passengers of reservation {rid} are updated.", facts={"who": who, "dob": dob})
            spec["sloppy"] = ["update_reservation_passengers", {"reservation_id": rid, "passengers": swapped}]
        else:
            raise ValueError(f"tau2-airline exact kinds are {self.kinds('exact')}, got {kind!r}")
        self.require_gold(world, [tuple(spec["write"])])
        return self.make_request(world, spec)

    def apply_correction(self, world: Tau2FamilyWorld, rng: np.random.Generator, request: Request) -> str:
        spec = self.spec(request)
        rid, facts = spec["entity_id"], spec["facts"]
        if spec["kind"] == "bags":
            stated = spec["write"][1]["payment_id"]
            first = spec["utterance"].replace(stated, facts["default_payment"])
            fix = f"Sorry, please charge {stated} instead."
        else:
            year = int(facts["dob"][:4])
            wrong = f"{year + int(rng.integers(1, 5))}{facts['dob'][4:]}"
            first = f"Please correct the date of birth of passenger {facts['who']} on reservation {rid} to {wrong}."
            fix = f"Sorry, the correct date of birth is {facts['dob']}."
        spec["utterance"] = request.utterance = first
        return fix

    def question_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, n_records: int) -> Request:
        pool = [r for r in self._own(world, future=False) if len(self._res(world, r).flights) == n_records]
        rid = pick(rng, pool)  # none: DrawFailed, the family draws another world
        prices = [f.price for f in self._res(world, rid).flights]
        answer = f"${sum(prices)}"
        spec = self._spec("question", rid,
                          f"How much did I pay per passenger in total for the flights of reservation {rid}?", None, "",
                          "", answer_template=f"The flights of reservation {rid} cost ${{answer}} per passenger.")
        return self.make_request(world, spec, communicate=[answer], answer=answer, n_records=len(prices))

    def selection_request(self, world: Tau2FamilyWorld, rng: np.random.Generator, kind: str, n_constraints: int,
                          n_distractors: int | None = None, style: str = "mixed") -> Request:
        """The user names a trip, not its id: add a bag to the one reservation that exactly ``n_constraints``
        stated facts single out; the decoys are the user's other reservations sharing the first one
        (``n_distractors`` is not varied here)."""
        if kind != "bags_by_trip":
            raise ValueError(f"tau2-airline selection kinds are {self.kinds('selection')}, got {kind!r}")
        own = self._own(world)
        if len(own) < 2:
            raise DrawFailed("the user has fewer than two open reservations")
        facts = {r: self._facts(self._res(world, r)) for r in own}
        target = pick(rng, own)
        keys = [str(k) for k in rng.permutation(sorted(facts[target]))]
        chosen: list[str] = []
        matching = list(own)
        for key in keys:
            if len(matching) == 1 and len(chosen) >= n_constraints:
                break
            chosen.append(key)
            matching = [r for r in matching if facts[r][key] == facts[target][key]]
        if matching != [target] or len(chosen) != n_constraints:
            raise DrawFailed(f"no {n_constraints} facts single out the target reservation")
        first = chosen[0]
        decoys = [r for r in own if r != target and facts[r][first] == facts[target][first]]
        decoys = decoys or [r for r in own if r != target]
        decoys = [decoys[int(j)] for j in rng.permutation(len(decoys))]
        phrase = "my reservation " + " ".join(_PHRASES[k].format(v=facts[target][k]) for k in chosen)
        payment = self._payments(world)[0]
        spec = self._bags(world, target, 1, payment, phrase=phrase + " (I do not remember its id)")
        spec["kind"], spec["lookup"] = "bags_by_trip", None
        spec["reads"] = [["get_reservation_details", {"reservation_id": r}]
                         for r in raw(world.db.users, world.user_id).reservations]
        spec["wrong"] = [spec["write"][0], self._bags_args(world, decoys[0], 1, payment)]
        self.require_gold(world, [tuple(spec["write"])])
        return self.make_request(world, spec, target=target, decoys=decoys, constraints=chosen)

    @staticmethod
    def _facts(res: Any) -> dict[str, str]:
        return {"origin": res.origin, "destination": res.destination, "cabin": res.cabin,
                "date": res.flights[0].date, "trip": res.flight_type}

    # -- policy checks on looked-up records ------------------------------------------------------
    def kinds(self, purpose: str) -> tuple[str, ...]:
        table = {"guarded": ("cancel", "bags", "change_flight"), "plain": ("cancel", "bags"),
                 "selection": ("bags_by_trip",), "question": ("question",), "exact": ("bags", "passenger")}
        if purpose not in table:
            raise ValueError(f"unknown request purpose {purpose!r}; known: {sorted(table)}")
        return table[purpose]

    def refusal(self, spec: dict[str, Any], record: dict[str, Any], user_id: str) -> str:
        rid, kind = spec["entity_id"], spec["kind"]
        if kind == "bags_by_trip":
            return ""
        if record.get("user_id") != user_id:
            return f"I cannot change reservation {rid}: it is not your reservation."
        if kind == "cancel" and not cancellable(record, spec["facts"]["reason"]):
            return (f"I cannot cancel reservation {rid}: it was booked more than 24 hours ago, it is not in business "
                    f"class and no travel insurance covers the reason ({spec['facts']['reason']}).")
        if kind == "bags" and spec["facts"]["total"] < int(record.get("total_baggages", 0)):
            return f"I cannot remove checked bags from reservation {rid}: bags can be added but not removed."
        if kind == "change_flight" and record.get("cabin") == "basic_economy":
            return f"I cannot change the flights of reservation {rid}: basic economy flights cannot be modified."
        return ""

    def question_values(self, spec: dict[str, Any], record: dict[str, Any]) -> list[float]:
        return [f["price"] for f in record.get("flights", [])]


_PHRASES = {"origin": "from {v}", "destination": "to {v}", "cabin": "in {v}", "date": "first flying on {v}",
            "trip": "({v})"}
