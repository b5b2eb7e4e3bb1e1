"""Routes of the allowed modules from a string built at run time to an attribute read, an eval or a setattr (no
forbidden name appears in the text): each ran code in the host when the loader imported the module; the static
check refuses them all, so the loader never imports them."""

from __future__ import annotations

import pytest

from tests.synthesis.llm.llm_env_modules import GOOD
from trace_envs.synthesis.llm import loader
from trace_envs.synthesis.llm.static import check_source

# each runs CODE (text built at run time: open(MARK, "w").write("x")); the class's module is not yet in
# sys.modules while it is imported, so dataclass compiles with empty globals: CODE travels in the key
RUNS_CODE = {
    "string.Formatter().get_field": '''
import string
U = "_" * 2
def helper():
    return 1
g = string.Formatter().get_field("0." + U + "globals" + U, [helper], {})[0]
g[U + "builtins" + U]["ev" + "al"](CODE)
''',
    "a Formatter subclass's format_field": '''
import string
U = "_" * 2
got = []
class F(string.Formatter):
    def format_field(self, value, spec):
        got.append(value)
        return ""
def helper():
    return 1
F().format("{0." + U + "globals" + U + "}", helper)
got[0][U + "builtins" + U]["ev" + "al"](CODE)
''',
    "functools.update_wrapper(assigned=...)": '''
import functools
U = "_" * 2
got = []
class W:
    def __setattr__(self, name, value):
        got.append(value)
def helper():
    return 1
functools.update_wrapper(W(), helper, (U + "globals" + U,), ())
got[0][U + "builtins" + U]["ev" + "al"](CODE)
''',
    "singledispatch evaluates a string annotation": '''
import functools
@functools.singledispatch
def f(x):
    return x
@f.register
def g(x: "ev" "al(CODE) or int"):
    return x
''',
    "enum's _convert_ reads builtins": '''
import enum
class E(enum.Enum):
    A = 1
    @classmethod
    def grab(cls):
        return cls._convert_("B", "builtins", lambda n: n == "ev" + "al")
E.grab()["ev" + "al"].value(CODE)
''',
    "copy's reductor sets __annotations__ for singledispatch": '''
import copy
import functools
U = "_" * 2
def target(x):
    return x
class R:
    def __reduce_ex__(self, proto):
        return (lambda: target, (), (None, {U + "annotations" + U: {"x": "ev" + "al(CODE) or int"}}))
copy.copy(R())
@functools.singledispatch
def f(x):
    return x
f.register(target)
''',
    "dataclass compiles run-time annotation keys (type)": '''
import dataclasses
U = "_" * 2
K = "a:{ev" + "al(bytes(" + str(list(CODE.encode())) + ").decode())}"
X = type("X", (), {U + "annotations" + U: {K: int}})
repr(dataclasses.dataclass(X, init=False, eq=False)())
''',
    "dataclass compiles run-time annotation keys (class body)": '''
import dataclasses
K = "a:{ev" + "al(bytes(" + str(list(CODE.encode())) + ").decode())}"
class X:
    __annotations__ = {K: int}
repr(dataclasses.dataclass(X, init=False, eq=False)())
''',
}

# refused without a full payload: each builds a class from a run-time dict, or a hook the module may not define
REFUSED = {
    "a metaclass of typing": "import typing\nX = typing.ABCMeta('X', (), {})\n",
    "a metaclass keyword": "class M:\n    pass\nclass X(metaclass=M):\n    pass\n",
    "enum's functional API": "import enum\nX = enum.Enum('X', [('a', 1)])\n",
    "enum's class aliased": "from enum import Enum\nE = Enum\n",
    "a member-less enum": "import enum\nclass Base(enum.Enum):\n    def label(self):\n        return 1\n",
    "enum.global_enum": "import enum\nclass X(enum.Enum):\n    A = 1\nenum.global_enum(X)\n",
    "make_dataclass": "import dataclasses\nX = dataclasses.make_dataclass('X', [])\n",
    "dataclass called, not decorating": "from dataclasses import dataclass\nclass X:\n    a: int = 0\n"
                                        "Y = dataclass(X)\n",
    "type(x)(...)": "X = type(int)('X', (), {})\n",
    "an __exit__ that swallows the time limit": "class Q:\n    def __enter__(self):\n        return self\n"
                                                "    def __exit__(self, *a):\n        return True\n",
    "__init_subclass__": "class B:\n    def __init_subclass__(cls):\n        pass\n",
    "a copy hook assigned": "def f(self, p):\n    return 1\nclass R:\n    __reduce__ = f\n",
    "a dunder bound by import": "class R:\n    from math import sqrt as __deepcopy__\n",
    "Formatter imported": "from string import Formatter\n",
    "the machinery replaced after the class": "def fast(self, action):\n    return None\nEnv.step = fast\n",
    "wraps imported": "from functools import wraps\n",
}


def _module(payload: str, marker) -> str:
    """``payload`` after a line that builds CODE, and before GOOD's imports and Env."""
    code = f'CODE = "open(" + {repr(repr(str(marker)))} + ", chr(119)).write(chr(120))"\n'
    return code + payload + GOOD.split('"""', 2)[2]


@pytest.mark.parametrize("name", sorted(RUNS_CODE))
def test_a_run_time_route_to_code_is_refused_and_never_imported(name, tmp_path):
    marker = tmp_path / "escaped"
    source = _module(RUNS_CODE[name], marker)
    report = check_source(source)
    assert not report.ok, name
    path = tmp_path / "cap_llm_source.py"
    path.write_text(source, encoding="utf-8")
    with pytest.raises(ValueError, match="fails the static check"):
        loader.load_env_class(path, loader.sha256_text(source))
    assert not marker.exists()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_class_from_a_run_time_dict_or_a_refused_hook_is_refused(name):
    assert not check_source(REFUSED[name] + GOOD).ok, name


def test_ordinary_enums_dataclasses_and_dunders_stay_allowed():
    extra = '''
import enum
import functools
from dataclasses import dataclass, field


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"

    def label(self):
        return self.value.title()


@dataclass(frozen=True)
class Pick:
    name: str
    tags: list = field(default_factory=list)

    def __lt__(self, other):
        return self.name < other.name

    def __len__(self):
        return len(self.tags)


@functools.lru_cache(maxsize=None)
def tier_of(name):
    return Tier("gold" if isinstance(name, str) and name < "m" else "silver")
'''
    source = GOOD.replace("\nclass Env(", extra + "\n\nclass Env(", 1)
    report = check_source(source)
    assert report.ok, report.problems
