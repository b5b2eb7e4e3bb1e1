"""A fast deep copy for JSON-shaped state (the tool envs' DBs): dicts, lists and immutable leaves.

``copy.deepcopy`` dispatches per object through a type table and reduction hooks; the DBs of the
retail-sim envs are thousands of small dicts, lists, strings and numbers, so a copier that knows
only those shapes is several times faster. Shared sub-objects stay shared in the copy (as with
``deepcopy``); any other type (tuples, sets, dataclasses, ...) falls back to ``copy.deepcopy``
with the same memo, so the result equals ``copy.deepcopy(obj)`` for every input.
"""

from __future__ import annotations

import copy
from typing import Any

_ATOMS = (str, int, float, bool, type(None))


def copy_tree(obj: Any) -> Any:
    """Deep copy of ``obj``; same result as ``copy.deepcopy(obj)``, faster on dicts/lists of atoms."""
    return _copy(obj, {})


def _copy(obj: Any, memo: dict[int, Any]) -> Any:
    cls = type(obj)
    if cls in _ATOMS:
        return obj
    found = memo.get(id(obj))
    if found is not None:
        return found
    if cls is dict:
        new: Any = {}
        memo[id(obj)] = new
        for key, value in obj.items():
            new[key] = value if type(value) in _ATOMS else _copy(value, memo)
        return new
    if cls is list:
        new = []
        memo[id(obj)] = new
        new.extend(value if type(value) in _ATOMS else _copy(value, memo) for value in obj)
        return new
    return copy.deepcopy(obj, memo)
