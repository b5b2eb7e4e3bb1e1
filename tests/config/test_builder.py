"""The one config builder: strict keys and types, every error names the key's full path."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from omegaconf import OmegaConf

from trace_envs.config_builder import ConfigError, build


@dataclass
class Inner:
    rank: int = 4
    scale: float = 1.0
    names: list[str] = field(default_factory=lambda: ["q"])


@dataclass
class Outer:
    name: str = "x"
    flag: bool = False
    limit: int | None = None
    mode: Literal["a", "b"] = "a"
    sizes: tuple[int, ...] = (1, 2)
    pair: tuple[str, int] = ("k", 0)
    weights: dict[str, float] = field(default_factory=dict)
    groups: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    where: Path = Path(".")
    extra: Any = None
    inner: Inner = field(default_factory=Inner)
    maybe: Inner | None = None


@dataclass
class Required:
    url: str
    retries: int = 2


@dataclass(frozen=True)
class Checked:
    n: int = 1

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclass
class HasChecked:
    checked: Checked = field(default_factory=Checked)


def test_defaults_and_a_full_nested_build():
    assert build(Outer, None) == Outer()
    cfg = build(Outer, {"name": "y", "flag": True, "limit": 3, "mode": "b", "sizes": [4, 5, 6], "pair": ["z", 9],
                        "weights": {"a": 1, "b": 0.5}, "groups": {"g": [{"k": 1}]}, "where": "/tmp/out",
                        "extra": {"anything": [1]}, "inner": {"rank": 8, "names": ["q", "v"]},
                        "maybe": {"scale": 2}}, "top")
    assert cfg.sizes == (4, 5, 6) and cfg.pair == ("z", 9) and cfg.where == Path("/tmp/out")
    assert cfg.weights == {"a": 1.0, "b": 0.5} and isinstance(cfg.weights["a"], float)  # ints widen to float
    assert cfg.inner == Inner(rank=8, scale=1.0, names=["q", "v"]) and cfg.inner.scale == 1.0
    assert cfg.maybe == Inner(scale=2.0) and isinstance(cfg.maybe.scale, float)
    assert cfg.groups == {"g": [{"k": 1}]} and cfg.extra == {"anything": [1]}
    assert build(Outer, {"limit": None, "maybe": None}) == Outer()  # Optional accepts null


def test_an_instance_passes_through_unchanged():
    inner = Inner(rank=2)
    assert build(Outer, {"inner": inner}).inner is inner


@pytest.mark.parametrize(("data", "message"), [
    ({"inner": {"rnak": 3}}, "top.inner.rnak: unknown key (did you mean 'rank'?); known keys: rank, scale, names"),
    ({"nmae": "x", "zzz": 1}, "top.nmae: unknown key (did you mean 'name'?) (and 1 more: ['zzz']); known keys: "
                              "name, flag, limit, mode, sizes, pair, weights, groups, where, extra, inner, maybe"),
    ({"inner": {"rank": "abc"}}, "top.inner.rank: expected int, got 'abc' (str)"),
    ({"inner": {"rank": True}}, "top.inner.rank: expected int, got True (bool)"),  # a bool is not an int
    ({"inner": {"rank": 2.5}}, "top.inner.rank: expected int, got 2.5 (float)"),
    ({"inner": {"scale": "1.0"}}, "top.inner.scale: expected float, got '1.0' (str)"),  # no string coercion
    ({"flag": 1}, "top.flag: expected bool, got 1 (int)"),
    ({"name": 3}, "top.name: expected str, got 3 (int)"),
    ({"limit": "many"}, "top.limit: expected int, got 'many' (str)"),
    ({"mode": "c"}, "top.mode: expected one of ['a', 'b'], got 'c' (str)"),
    ({"sizes": [1, "two"]}, "top.sizes[1]: expected int, got 'two' (str)"),
    ({"sizes": 3}, "top.sizes: expected a list, got 3 (int)"),
    ({"pair": ["z"]}, "top.pair: expected 2 items, got 1"),
    ({"inner": {"names": "q"}}, "top.inner.names: expected a list, got 'q' (str)"),  # a string is not a list
    ({"weights": {"a": "heavy"}}, "top.weights.a: expected float, got 'heavy' (str)"),
    ({"weights": {"a": float("nan")}}, "top.weights.a: expected a finite number, got nan"),
    ({"weights": [1]}, "top.weights: expected a mapping, got [1] (list)"),
    ({"groups": {"g": [3]}}, "top.groups.g[0]: expected a mapping, got 3 (int)"),
    ({"inner": 5}, "top.inner: expected a mapping of Inner fields, got 5 (int)"),
    ({"maybe": {"rank": "x"}}, "top.maybe.rank: expected int, got 'x' (str)"),
    ({"where": 5}, "top.where: expected Path, got 5 (int)"),
])
def test_bad_input_names_the_full_key_path(data, message):
    with pytest.raises(ConfigError) as info:
        build(Outer, data, "top")
    assert str(info.value) == message


def test_missing_required_key_and_post_init_errors_carry_the_path():
    assert build(Required, {"url": "http://h"}) == Required("http://h")
    with pytest.raises(ConfigError, match=r"^judge\.url: missing required key \(str\)$"):
        build(Required, {"retries": 1}, "judge")
    with pytest.raises(ConfigError, match=r"^outer\.checked: n must be >= 1, got 0$"):
        build(HasChecked, {"checked": {"n": 0}}, "outer")


def test_omegaconf_containers_are_resolved_first():
    cfg = OmegaConf.create({"base": 6, "top": {"inner": {"rank": "${base}", "names": ["a", "b"]}}})
    assert build(Outer, cfg.top).inner == Inner(rank=6, names=["a", "b"])
    with pytest.raises(ConfigError, match=r"^Outer\.inner\.rank: expected int"):
        build(Outer, OmegaConf.create({"inner": {"rank": "six"}}))


def test_builder_rejects_a_non_dataclass():
    with pytest.raises(TypeError, match="needs a dataclass type"):
        build(dict, {})
