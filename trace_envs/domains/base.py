"""The small domain interface the capability env families are written against.

A *domain* is a tool-use world shaped like a target benchmark (retail-sim now; τ²-Bench airline /
retail later): it owns the DB, the tools over it (same ToolBox as the target), the policy text, the
scripted user, gold replay + DB hash, and a handful of *request primitives* — one user request of a
given shape, with its gold writes — from which each family composes its tasks. Families never touch
a domain's DB layout directly: they reason about requests, write tools, entity states and hashes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trace_envs.core.tool_env import UserReply
from trace_envs.core.tools import ToolBox
from trace_envs.episode import ScriptedPolicy

# Why a guarded request must be refused ("allow" = it must be carried out).
GUARD_CASES = ("allow", "ownership", "status", "policy")


@dataclass
class Request:
    """One user request in domain terms, with its ground truth."""

    kind: str
    entity_id: str
    utterance: str
    gold_actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    communicate: list[str] = field(default_factory=list)
    case: str = "allow"  # one of GUARD_CASES
    reason_words: tuple[str, ...] = ()  # words a refusal must use to count as explained
    details: dict[str, Any] = field(default_factory=dict)  # family-visible facts (constraints, answer, ...)
    native: Any = None  # the domain's own object (retail-sim: an ``Intent``)

    @property
    def must_refuse(self) -> bool:
        return self.case != "allow"


class ScriptedUserLike(Protocol):
    def opening(self) -> str: ...

    def reply(self, assistant_text: str) -> UserReply: ...


class Domain(ABC):
    """A tool-use domain. Implementations: ``trace_envs.domains.retail_sim.RetailSimDomain``."""

    name: str
    policy: str
    write_tools: frozenset[str]
    guard_cases: tuple[str, ...] = GUARD_CASES  # the subset of GUARD_CASES this domain can generate
    # selection request shapes this domain can generate; "mixed" (every domain) draws the constraints at random
    selection_styles: tuple[str, ...] = ("mixed",)
    # Family settings (env kwargs) this domain does not vary: name -> the value every task realizes (None: the
    # setting means nothing here and is left out of the task's difficulty). A family refuses any other value.
    fixed_settings: dict[str, float | None] = {}
    # Family settings this domain honours over a narrower range than the family's: name -> (lowest, highest).
    setting_ranges: dict[str, tuple[int, int]] = {}

    def setting_problem(self, name: str, value: Any) -> str | None:
        """Why this domain cannot honour the family setting ``name=value`` (None: it can)."""
        if name in self.fixed_settings:
            fixed = self.fixed_settings[name]
            if fixed is None:
                return f"domain {self.name!r} does not honour {name} (its tasks do not vary it); leave it unset"
            if value != fixed:
                return f"domain {self.name!r} realizes only {name}={fixed} in every task; got {value!r}"
        if name in self.setting_ranges:
            low, high = self.setting_ranges[name]
            if not low <= value <= high:
                return f"domain {self.name!r} honours {name} in [{low}, {high}] only; got {value!r}"
        return None

    # -- world, tools, verification --------------------------------------------------------------
    @abstractmethod
    def new_world(self, rng: np.random.Generator, split: str = "train") -> Any:
        """A fresh world (DB + the acting user) drawn from ``rng``; a domain over a fixed database draws from
        the pool of the seed's ``split`` (``trace_envs.splits``)."""

    @abstractmethod
    def world_db(self, world: Any) -> dict[str, Any]:
        """The world's DB (mutable dict)."""

    @abstractmethod
    def build_tools(self, db: dict[str, Any]) -> ToolBox:
        """The target's tools bound to ``db`` (same names and schemas as the target)."""

    @abstractmethod
    def replay(self, db: dict[str, Any], actions: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """Gold replay on a copy of ``db``."""

    def scoring_gold(self, requests: list[Request], writes: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """The gold actions an episode's end state is judged against, given the agent's write calls (``{"name",
        "arguments", "error"}``, in order): the requests' own gold by default. A domain whose requests leave a
        choice open (retail: the payment method of an exchange or item change the user named none for) takes that
        choice as the agent made it, so any end state the user would accept matches."""
        return [action for request in requests for action in request.gold_actions]

    def refuse_call(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Why a well-formed call to one of this domain's tools is refused before it runs (an ``Error:``
        observation, as a malformed call), or ``None``: every call runs (the default)."""
        return None

    @abstractmethod
    def db_hash(self, db: dict[str, Any]) -> str:
        """End-state fingerprint."""

    @abstractmethod
    def entity_states(self, db: dict[str, Any]) -> dict[str, Any]:
        """``{entity key: record}`` for per-entity diffs (dense multi-step reward)."""

    @abstractmethod
    def entity_key(self, request: Request) -> str:
        """The ``entity_states`` key a request's writes change."""

    # -- request primitives ----------------------------------------------------------------------
    @abstractmethod
    def kinds(self, purpose: str) -> tuple[str, ...]:
        """Request kinds for a purpose: ``guarded``, ``selection``, ``question``, ``exact``, ``plain``."""

    @abstractmethod
    def guarded_request(self, world: Any, rng: np.random.Generator, kind: str, case: str) -> Request:
        """A write request whose precondition holds (``case='allow'``) or fails for ``case``."""

    @abstractmethod
    def selection_request(self, world: Any, rng: np.random.Generator, kind: str, n_constraints: int,
                          n_distractors: int, style: str = "mixed") -> Request:
        """Pick one record among distractors under ``n_constraints`` constraints, in one of
        ``selection_styles`` (the family checks ``style`` against them)."""

    @abstractmethod
    def question_request(self, world: Any, rng: np.random.Generator, n_records: int) -> Request:
        """A question whose answer is a value computed over ``n_records`` records."""

    @abstractmethod
    def exact_request(self, world: Any, rng: np.random.Generator, kind: str) -> Request:
        """A write whose arguments must be copied exactly (non-default values)."""

    @abstractmethod
    def plain_request(self, world: Any, rng: np.random.Generator, kind: str) -> Request:
        """An allowed write with default-looking arguments (a step of a compound task)."""

    @abstractmethod
    def apply_correction(self, world: Any, rng: np.random.Generator, request: Request) -> str:
        """Rewrite ``request`` so the user first states a perturbed argument; return the correcting sentence."""

    # -- conversation ----------------------------------------------------------------------------
    @abstractmethod
    def lookup_calls(self, world: Any, requests: list[Request]) -> list[tuple[str, dict[str, Any]]]:
        """The read calls an agent makes before acting (authentication + lookups), in order."""

    @abstractmethod
    def make_user(self, world: Any, requests: list[Request]) -> ScriptedUserLike:
        """The scripted user for these requests."""

    @abstractmethod
    def annotation(self, world: Any, requests: list[Request]) -> dict[str, Any]:
        """The task annotation (``info['task']``) the domain's scripted experts follow."""

    @abstractmethod
    def scripted_policy(self, knobs: dict[str, float], seed: int = 0) -> ScriptedPolicy:
        """The domain's scripted expert with capability knobs (all 0 = oracle)."""
