"""The copy-on-access DB collections never let tool code mutate the shared pristine records."""

from __future__ import annotations

import copy

from pydantic import BaseModel

from trace_envs.tau2.runtime import CopyOnAccessDict, clone


class Item(BaseModel):
    name: str
    tags: list[str]
    extra: dict[str, int] = {}


def pristine() -> dict[str, Item]:
    return {k: Item(name=k, tags=[k], extra={"n": 1}) for k in "abcd"}


def test_every_access_path_returns_private_copies():
    base = pristine()
    snapshot = {k: v.model_dump() for k, v in base.items()}
    d = CopyOnAccessDict(base)
    d["a"].tags.append("x")
    d.get("b").extra["n"] = 5
    for v in d.values():
        v.name += "!"
    for _, v in d.items():
        v.tags.clear()
    dict(d)["c"].name = "y"
    {**d}["d"].name = "z"
    copy.deepcopy(d)["a"].name = "w"
    d.pop("d").name = "q"
    assert {k: v.model_dump() for k, v in base.items()} == snapshot  # pristine untouched
    assert d["a"].tags == [] and d["a"].name == "a!" and d["b"].extra == {"n": 5} and "d" not in d


def test_unread_records_stay_shared_and_clone_is_equal():
    base = pristine()
    d = CopyOnAccessDict(base)
    assert dict.__getitem__(d, "c") is base["c"]  # untouched: shared, so hashing sees the same data
    it = iter(d.values())
    next(it)
    assert dict.__getitem__(d, "a") is not base["a"] and dict.__getitem__(d, "b") is base["b"]  # lazy
    twin = clone(base["a"])
    assert twin == base["a"] and twin is not base["a"] and twin.tags is not base["a"].tags
