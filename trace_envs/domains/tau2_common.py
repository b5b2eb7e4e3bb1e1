"""What the τ² airline and retail family domains share: worlds over tau2's own DB, tools executed by
tau2's ``Environment``, gold replay, tau2's DB hash, cheap state comparison, the scripted user.

A world is a fresh copy-on-access tau2 DB (``trace_envs.tau2.runtime.fresh_db``): untouched records
stay shared with the pristine DB, so snapshots, replays and per-entity diffs only copy what a tool
touched. Requests are drawn from real records (users, orders/reservations, products/flights); a
request whose gold write tau2 would reject is never emitted (``gold_ok``), and a world that cannot
host a request raises ``DrawFailed`` so the family draws another.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_envs.core.scripted import ScriptedUserReplies
from trace_envs.core.tools import ToolBox
from trace_envs.domains.base import Domain, Request
from trace_envs.domains.errors import DrawFailed
from trace_envs.splits import SPLITS, pool_split
from trace_envs.tau2.runtime import (
    _DB_MODULES,
    CopyOnAccessDict,
    clone,
    fresh_db,
    refuse_tau2_call,
    require_tau2,
)

OWNERSHIP_WORDS = ("not your", "another", "belong", "someone else", "other customer", "other user", "not yours")
AUTH_WORDS = ("verify", "identity", "authenticat")
_IDENTITY_WORDS = ("email", "zip", "name", "user id")
MAX_IDLE_REPLIES = 2


@dataclass
class Tau2FamilyWorld:
    """One family world: a fresh tau2 DB, the acting user and how they identify themselves."""

    db: Any
    user_id: str
    identity: dict[str, str]  # what the user tells the agent (may be wrong: authentication case)
    identify: tuple[str, dict[str, Any]]  # the agent's identification call
    used: set[str] = field(default_factory=set)  # entity ids already taken by a request
    split: str = "train"  # the seed's split: every user the world's requests draw on is from its pool


def split_pools(user_ids: list[str]) -> dict[str, list[str]]:
    """``user_ids`` (sorted) partitioned into the train and test pools (``trace_envs.splits.pool_split``)."""
    pools: dict[str, list[str]] = {name: [] for name in SPLITS}
    for user_id in user_ids:
        pools[pool_split(user_id)].append(user_id)
    return pools


def pool_of(pools: dict[str, Any], split: str) -> Any:
    if split not in pools:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(pools)}")
    return pools[split]


def pick(rng: np.random.Generator, values: list | tuple) -> Any:
    if not values:
        raise DrawFailed("nothing to pick from")
    return values[int(rng.integers(len(values)))]


def raw(collection: dict, key: str) -> Any:
    """A record without taking ownership (reads for drawing; never mutate the result)."""
    return dict.__getitem__(collection, key)


@functools.lru_cache(maxsize=None)
def _get_environment(tau2_domain: str) -> Any:
    require_tau2()
    return importlib.import_module(_DB_MODULES[tau2_domain][4]).get_environment


class _States(Mapping):
    """``entity_states`` view: ``"collection/key" -> record dict``, dumped on access only."""

    def __init__(self, db: Any, collections: tuple[str, ...]):
        self.db, self.collections = db, collections

    def __getitem__(self, key: str) -> Any:
        coll, _, rec = key.partition("/")
        if coll not in self.collections:
            raise KeyError(key)
        return raw(getattr(self.db, coll), rec).model_dump()

    def __iter__(self) -> Iterator[str]:
        for coll in self.collections:
            yield from (f"{coll}/{k}" for k in dict.keys(getattr(self.db, coll)))

    def __len__(self) -> int:
        return sum(len(getattr(self.db, c)) for c in self.collections)


class Tau2FamilyDomain(Domain):
    """Base of ``Tau2AirlineDomain`` / ``Tau2RetailDomain``; subclasses draw the requests."""

    tau2_domain: str = ""
    entity_collection: str = ""

    def __init__(self) -> None:
        require_tau2()
        from tau2.environment.toolkit import ToolType

        from trace_envs.tau2.env import agent_system_prompt

        probe = self._environment(fresh_db(self.tau2_domain))
        self.tau2_policy = probe.get_policy()
        self.policy = agent_system_prompt(self.tau2_policy)
        self.write_tools = frozenset(n for n in probe.tools.get_tools() if probe.tools.tool_type(n) == ToolType.WRITE)
        self.tool_names = frozenset(probe.tools.get_tools())
        self.collections = tuple(type(probe.tools.db).model_fields)

    # -- world, tools, verification --------------------------------------------------------------
    def _environment(self, db: Any) -> Any:
        return _get_environment(self.tau2_domain)(db=db)

    def world_db(self, world: Tau2FamilyWorld) -> Any:
        return world.db

    def build_tools(self, db: Any) -> ToolBox:
        from trace_envs.tau2.env import Tau2ToolBox

        return Tau2ToolBox(self._environment(db))

    def snapshot(self, db: Any) -> Any:
        """A private copy of ``db`` that copies only the records a tool touched."""
        new = fresh_db(self.tau2_domain)
        for name in self.collections:
            old, dst = getattr(db, name), getattr(new, name)
            if isinstance(old, CopyOnAccessDict):
                for key in old._own:
                    if key in old:
                        dst[key] = clone(dict.__getitem__(old, key))
                for key in [k for k in dict.keys(dst) if k not in old]:
                    dict.__delitem__(dst, key)
            else:
                setattr(new, name, clone(old))
        return new

    def same_state(self, a: Any, b: Any) -> bool:
        """``db_hash(a) == db_hash(b)`` for two DBs of this domain, comparing only touched records."""
        for name in self.collections:
            x, y = getattr(a, name), getattr(b, name)
            if not (isinstance(x, CopyOnAccessDict) and isinstance(y, CopyOnAccessDict)):
                if x != y:
                    return False
                continue
            if set(dict.keys(x)) != set(dict.keys(y)):
                return False
            for key in x._own | y._own:
                if raw(x, key).model_dump() != raw(y, key).model_dump():
                    return False
        return True

    def replay(self, db: Any, actions: list[tuple[str, dict[str, Any]]]) -> Any:
        """tau2 gold-replay semantics on a snapshot of ``db``: every action in order, errors ignored."""
        new = self.snapshot(db)
        environment = self._environment(new)
        for name, args in actions:
            try:
                environment.make_tool_call(name, requestor="assistant", **args)
            except Exception:  # noqa: BLE001 - tau2 replay ignores failing gold actions
                pass
        return new

    def gold_ok(self, db: Any, actions: list[tuple[str, dict[str, Any]]]) -> bool:
        """Whether tau2 accepts every action in order on a snapshot of ``db``."""
        environment = self._environment(self.snapshot(db))
        for name, args in actions:
            try:
                environment.make_tool_call(name, requestor="assistant", **args)
            except Exception:  # noqa: BLE001
                return False
        return True

    def require_gold(self, world: Tau2FamilyWorld, actions: list[tuple[str, dict[str, Any]]]) -> None:
        if not self.gold_ok(world.db, actions):
            raise DrawFailed(f"tau2 rejects the gold actions {actions}")

    def refuse_call(self, name: str, arguments: dict[str, Any]) -> str | None:
        return refuse_tau2_call(name, arguments)

    def db_hash(self, db: Any) -> str:
        """tau2's own DB hash (``Environment.get_db_hash``)."""
        return self._environment(db).get_db_hash()

    def entity_states(self, db: Any) -> Mapping:
        return _States(db, self.collections)

    def entity_key(self, request: Request) -> str:
        return f"{self.entity_collection}/{request.entity_id}"

    # -- conversation ----------------------------------------------------------------------------
    def spec(self, request: Request) -> dict[str, Any]:
        return request.native

    def make_request(self, world: Tau2FamilyWorld, spec: dict[str, Any], case: str = "allow",
                     reason_words: tuple[str, ...] = (), communicate: list[str] | None = None,
                     **details: Any) -> Request:
        """A ``Request`` from a request spec (what the τ² expert follows, see ``tau2_expert``)."""
        world.used.add(spec["entity_id"])
        write = spec.get("write")
        gold = [tuple(write)] if write and case == "allow" else []
        if spec["kind"] == "question":
            gold = []
        return Request(kind=spec["kind"], entity_id=spec["entity_id"], utterance=spec["utterance"],
                       gold_actions=[(n, dict(a)) for n, a in gold], case=case, reason_words=reason_words,
                       communicate=list(communicate or []), details=details, native=spec)

    def lookup_calls(self, world: Tau2FamilyWorld, requests: list[Request]) -> list[tuple[str, dict[str, Any]]]:
        calls = [world.identify]
        if world.identify[0] != "get_user_details":
            calls.append(("get_user_details", {"user_id": world.user_id}))
        for r in requests:
            spec = self.spec(r)
            if spec.get("lookup"):
                calls.append(tuple(spec["lookup"]))
            calls += [tuple(c) for c in spec.get("reads", [])]
        return calls

    def make_user(self, world: Tau2FamilyWorld, requests: list[Request]) -> "Tau2FamilyUser":
        return Tau2FamilyUser(self.identity_sentence(world.identity), [r.utterance for r in requests])

    def annotation(self, world: Tau2FamilyWorld, requests: list[Request]) -> dict[str, Any]:
        specs = [self.spec(r) for r in requests]
        for spec, r in zip(specs, requests):
            spec["utterance"] = r.utterance
        return {
            "domain": self.name, "benchmark": "tau2", "tau2_domain": self.tau2_domain,
            "user_id": world.user_id, "identity": dict(world.identity),
            "identify": [world.identify[0], dict(world.identify[1])],
            "requests": specs,
            "gold_actions": [[n, a] for r in requests for n, a in r.gold_actions],
            "communicate": [s for r in requests for s in r.communicate],
        }

    def scripted_policy(self, knobs: dict[str, float], seed: int = 0) -> Any:
        from trace_envs.domains.tau2_expert import Tau2Expert

        return Tau2Expert(self, knobs, seed=seed)

    # -- domain-specific -------------------------------------------------------------------------
    def identity_sentence(self, identity: dict[str, str]) -> str:
        raise NotImplementedError

    def refusal(self, spec: dict[str, Any], record: dict[str, Any], user_id: str) -> str:
        """The policy's refusal for ``spec`` given the record the agent looked up ("" = allowed)."""
        raise NotImplementedError

    def question_values(self, spec: dict[str, Any], record: dict[str, Any]) -> list[float]:
        """The numbers a question's answer sums, read from the looked-up record."""
        raise NotImplementedError


class Tau2FamilyUser(ScriptedUserReplies):
    """Scripted user of a τ² family episode: every request at once, yes to confirmations, identity on
    request, stop when the agent's turn asks nothing."""

    identity_words = _IDENTITY_WORDS
    max_idle_replies = MAX_IDLE_REPLIES

    def __init__(self, identity_sentence: str, utterances: list[str]):
        self.identity_sentence = identity_sentence
        self.utterances = utterances
        self.idle_replies = 0

    def opening(self) -> str:
        return f"Hi! {self.identity_sentence} {' '.join(self.utterances)}"

    def _identity_text(self) -> str:
        return self.identity_sentence
