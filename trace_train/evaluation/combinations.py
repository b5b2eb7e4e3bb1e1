"""Held-out success by the *combination* of capabilities a task needs, and the best per-episode choice.

A target task often needs several capabilities at once (on retail-sim, about half of the held-out tasks need two
or more). A single adapter fixes one; an episode-level router can only pick one adapter per episode; so the
per-episode oracle over the base and the adapters -- an episode counts as solved when at least one of them solved
it -- is the most any episode-level routing over them can reach. The table says where a composition wins and
loses, and whether the adapters or the routing bound it.

Two routers read the task's own capability annotations (the held-out ground truth). The *annotation ceiling*
(:attr:`CombinationTable.annotation_ceiling`) sends each combination of capabilities to the one slot (the base
included) that solves the most of its tasks on these same episodes: no router that reads only the annotations can
do better, while the best per-episode choice (which also profits from a slot's luck on one seed) bounds any
router at all. *Priority routing* (:meth:`CombinationTable.annotation_routing`) is a simple router under that
ceiling: each episode plays on the adapter of the first capability it needs in one priority order (the base when
it needs none of the adapters' capabilities), the best order chosen on these same episodes; it never sends a task
to the base or to an adapter of a capability the task does not need.

Episodes of different policies are paired by ``(env_id, seed)`` and, when a seed has several trials, by their
order in each policy's records (evaluation plays every policy on the same seeds and trials).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import permutations
from typing import Any

from trace_envs.records import task_capabilities

NONE = "(none)"  # the cell of tasks that need no capability
SEVERAL = "(2+ capabilities)"  # :meth:`CombinationTable.by_need`'s group of tasks that need two or more
EXACT_ORDERS_UP_TO = 7  # priority routing tries all n! orders up to here (7! = 5,040); a greedy order above


@dataclass(frozen=True)
class CombinationCell:
    """The held-out tasks that need exactly ``capabilities`` (sorted; empty = none): each policy's
    successes among them, and how many the best per-episode choice solves."""

    capabilities: tuple[str, ...]
    n: int
    successes: dict[str, int]
    best_choice: int

    @property
    def label(self) -> str:
        return " + ".join(self.capabilities) if self.capabilities else NONE

    def to_dict(self) -> dict[str, Any]:
        return {"capabilities": list(self.capabilities), "n": self.n, "successes": dict(self.successes),
                "best_choice": self.best_choice}


@dataclass(frozen=True)
class CombinationTable:
    """Every combination cell of the episodes that all ``policies`` played, largest first."""

    policies: list[str]
    choice: list[str]  # the policies the per-episode oracle chooses among
    cells: list[CombinationCell]

    @property
    def n(self) -> int:
        return sum(c.n for c in self.cells)

    def total(self, policy: str) -> int:
        return sum(c.successes[policy] for c in self.cells)

    @property
    def best_choice(self) -> int:
        return sum(c.best_choice for c in self.cells)

    @property
    def annotation_ceiling(self) -> int:
        """The most a router that reads only the tasks' capability annotations solves: per combination cell, the
        successes of the one policy of ``choice`` (the base included) that solves the most of its tasks."""
        return sum(max(c.successes[p] for p in self.choice) for c in self.cells)

    def multi_capability(self) -> tuple[int, dict[str, int]]:
        """Episodes whose task needs two or more capabilities, and each policy's successes among them."""
        cells = [c for c in self.cells if len(c.capabilities) >= 2]
        return sum(c.n for c in cells), {p: sum(c.successes[p] for c in cells) for p in self.policies}

    def by_need(self) -> dict[str, tuple[int, dict[str, int]]]:
        """The cells in three kinds: tasks that need nothing (:data:`NONE`), each capability a task needs alone
        (its name), and every task that needs two or more (:data:`SEVERAL`): label -> (episodes, each policy's
        successes), in that order (capabilities by name)."""
        groups: dict[str, list[CombinationCell]] = defaultdict(list)
        for cell in self.cells:
            groups[SEVERAL if len(cell.capabilities) >= 2 else cell.label].append(cell)
        labels = sorted(groups, key=lambda g: (g != NONE, g == SEVERAL, g))
        return {g: (sum(c.n for c in groups[g]), {p: sum(c.successes[p] for c in groups[g]) for p in self.policies})
                for g in labels}

    def annotation_routing(self, adapters: Mapping[str, str], base: str = "base") -> tuple[tuple[str, ...], int]:
        """``(order, successes)`` of the best priority router over the annotations: ``adapters`` maps a capability
        to the policy that plays its tasks; an episode goes to the first capability of ``order`` its task needs,
        ``base`` when none. Every order is tried up to :data:`EXACT_ORDERS_UP_TO` adapters; above, the order is
        built greedily. Not a bound: :attr:`annotation_ceiling` is the most a router reading the annotations can
        reach."""
        unknown = [p for p in [base, *adapters.values()] if p not in self.policies]
        if unknown:
            raise ValueError(f"annotation routing names policies without records: {unknown}")

        def solved(order: tuple[str, ...]) -> int:
            return sum(cell.successes[next((adapters[cap] for cap in order if cap in cell.capabilities), base)]
                       for cell in self.cells)

        caps = sorted(adapters)
        if len(caps) <= EXACT_ORDERS_UP_TO:
            scored = [(order, solved(order)) for order in permutations(caps)]
            return max(scored, key=lambda item: item[1])  # the first best order on a tie
        order: tuple[str, ...] = ()  # greedy: each next capability the one that solves the most so far
        while len(order) < len(caps):
            rest = [c for c in caps if c not in order]
            order += (max(rest, key=lambda c: solved(order + (c,))),)
        return order, solved(order)

    def to_dict(self) -> dict[str, Any]:
        return {"policies": list(self.policies), "choice": list(self.choice), "n": self.n,
                "best_choice": self.best_choice, "annotation_ceiling": self.annotation_ceiling,
                "cells": [c.to_dict() for c in self.cells]}


def own_adapters(stages: Mapping[str, Any]) -> list[str]:
    """The adapters a pipeline run trained for itself: its ``train/<capability>`` stages (``pipeline.json``),
    other run seeds' ``train/<capability>@s<k>`` copies left out."""
    return [name.split("/", 1)[1] for name in stages if name.startswith("train/") and "@" not in name]


def _field(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, Mapping) else getattr(record, name, None)


def _paired(records: Sequence[Any]) -> dict[tuple[str, int, int], Any]:
    """``(env_id, seed, trial)`` -> record, the trial being the record's order among its seed's records."""
    seen: dict[tuple[str, int], int] = defaultdict(int)
    keyed = {}
    for record in records:
        seed = _field(record, "seed")
        if seed is None:
            continue
        base = (str(_field(record, "env_id")), int(seed))
        keyed[base + (seen[base],)] = record
        seen[base] += 1
    return keyed


def combination_table(records: Mapping[str, Sequence[Any]], choice: Sequence[str]) -> CombinationTable:
    """Success per capability combination for every policy in ``records`` (policy -> its evaluation records,
    :class:`~trace_envs.records.TrajectoryRecord` objects or their dicts), over the episodes every policy
    played, with the per-episode oracle over ``choice`` (a subset of the policies)."""
    if not records:
        raise ValueError("combination_table needs the records of at least one policy")
    if not choice:
        raise ValueError("combination_table needs at least one policy to choose among")
    missing = [c for c in choice if c not in records]
    if missing:
        raise ValueError(f"choice names policies without records: {missing}; have {sorted(records)}")
    keyed = {policy: _paired(rows) for policy, rows in records.items()}
    common = set.intersection(*(set(k) for k in keyed.values()))
    groups: dict[tuple[str, ...], list[tuple[str, int, int]]] = defaultdict(list)
    for key in sorted(common):
        any_policy = next(iter(keyed.values()))[key]
        info = _field(any_policy, "info")
        caps = task_capabilities(info) if isinstance(info, Mapping) else None
        groups[tuple(sorted(caps or ()))].append(key)
    cells = []
    for caps, keys in groups.items():
        successes = {p: sum(bool(_field(keyed[p][k], "success")) for k in keys) for p in records}
        best = sum(any(bool(_field(keyed[p][k], "success")) for p in choice) for k in keys)
        cells.append(CombinationCell(caps, len(keys), successes, best))
    cells.sort(key=lambda c: (-c.n, c.capabilities))
    return CombinationTable(list(records), list(choice), cells)
