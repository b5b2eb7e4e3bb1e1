"""LLM-written modules that name nothing forbidden yet reach the interpreter through what allowed modules hold
(``typing.sys``, ``dataclasses.builtins``, numpy re-exported by the authoring module) are refused by the static
check; what an authored env runs in the host has a time limit and is the very text that was checked."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.synthesis.llm.llm_env_modules import GOOD
from trace_envs.core.time_limit import CallTimeout, time_limit
from trace_envs.synthesis.llm import authoring, loader
from trace_envs.synthesis.llm.static import check_source

ESCAPES = {
    "typing.sys": "import typing\nX = typing.sys.modules\n",
    "dataclasses.builtins": "import dataclasses\nX = dataclasses.builtins.open\n",
    "enum.sys": "import enum\nX = enum.sys\n",
    "statistics.sys": "import statistics\nX = statistics.sys\n",
    "a private module attribute": "import collections\nX = collections._sys\n",
    "a module imported by name": "from typing import sys\n",
    "a private name imported": "from string import _re\n",
    "an alias of a module": "import typing\nT = typing\n",
    "a module passed whole": "import re\nX = list(re)\n",
    "numpy from the authoring module": "from trace_envs.synthesis.llm.authoring import np\n",
    "the authoring module itself": "import trace_envs.synthesis.llm.authoring\n",
    "an array written to a file": "def f(rng):\n    rng.integers(3, size=2).tofile('/tmp/x')\n",
    "a frame's globals": "def f(g):\n    return g.gi_frame.f_globals\n",
    "forward refs evaluated": "import typing\nX = typing.get_type_hints\n",
    "a bare except": "def f():\n    try:\n        pass\n    except:\n        pass\n",
    "BaseException caught": "def f():\n    try:\n        pass\n    except (ValueError, BaseException):\n        pass\n",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escapes_through_allowed_modules_are_refused(name):
    report = check_source(ESCAPES[name] + GOOD)
    assert not report.ok, name


@pytest.mark.parametrize("method", ["step", "reset", "_new_episode", "oracle_turns", "check_call"])
def test_env_may_not_override_the_machinery_that_limits_its_methods(method):
    source = GOOD.replace("    def oracle(self, task):", f"    def {method}(self, *a, **k):\n        return None\n\n"
                          "    def oracle(self, task):")
    report = check_source(source)
    assert not report.ok and any(f"may not override {method!r}" in p for p in report.problems)


def test_ordinary_authoring_stays_allowed():
    """What env code does every day: the rng's methods, dict copies, the standard modules' functions, private
    state on self, helper classes with their own dunders."""
    extra = '''
import math
import re
import collections
from dataclasses import dataclass


@dataclass
class Pick:
    name: str

    def __post_init__(self):
        self.name = self.name.strip()

    def __repr__(self):
        return f"Pick({self.name})"


def jitter(rng, users):
    table = dict(users).copy()
    counts = collections.Counter(re.findall(r"[a-z]+", " ".join(table)))
    return math.sqrt(rng.random() + len(counts)), rng.choice(sorted(table))
'''
    source = GOOD.replace("\nclass Env(", extra + "\n\nclass Env(", 1).replace(
        "        users = sorted(db[\"users\"])\n",
        "        users = sorted(db[\"users\"])\n        self._seen = jitter(rng, db[\"users\"])\n")
    report = check_source(source)
    assert report.ok, report.problems


def test_time_limit_raises_in_the_block_and_keeps_an_outer_timer():
    with pytest.raises(CallTimeout, match="spin ran past its 0.2 s time limit"):
        with time_limit(0.2, "spin"):
            while True:
                pass
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.6)
        start = time.monotonic()
        with time_limit(5, "quick"):
            pass
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0.3  # the outer timer still runs
        while not fired and time.monotonic() - start < 5:
            time.sleep(0.01)
        assert fired and fired[0] - start < 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _load(tmp_path, source):
    path = tmp_path / "cap_llm_source.py"
    path.write_text(source, encoding="utf-8")
    return loader.load_env_class(path, loader.sha256_text(source))


def test_a_verifier_that_loops_in_the_host_ends_as_a_timeout(tmp_path, monkeypatch):
    """The validator plays three policies only; a verify that loops on other text passes it, then would hang
    whoever plays the env in the host (calibration, GRPO). It raises TimeoutError there instead."""
    monkeypatch.setattr(authoring, "METHOD_TIME_LIMIT_S", 0.3)
    source = GOOD.replace("    def verify(self, task, outcome):\n",
                          "    def verify(self, task, outcome):\n        while outcome.said('sorry'):\n"
                          "            pass\n").replace("transfer_when_stuck", "loops_on_sorry")
    env = _load(tmp_path, source)()
    env.reset(seed=0)
    env.step("I'm sorry, I cannot help with that.")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="verify ran past its 0.3 s time limit"):
        env.step("###STOP###")
    assert time.monotonic() - start < 5


def test_the_loader_runs_the_text_it_checked_not_a_stale_bytecode_cache(tmp_path):
    """importlib would take ``__pycache__`` bytecode of an older text of the same size and second."""
    a = GOOD.replace('"email change"', '"email AAAAAA"').replace("transfer_when_stuck", "stale_a")
    b = GOOD.replace('"email change"', '"email BBBBBB"').replace("transfer_when_stuck", "stale_b")
    assert len(a) == len(b)
    path = tmp_path / "cap_llm_source.py"
    path.write_text(a, encoding="utf-8")
    stat = path.stat()
    import py_compile

    py_compile.compile(str(path), doraise=True)  # A's bytecode, keyed by A's mtime and size
    path.write_text(b, encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    cls = loader.load_env_class(path, loader.sha256_text(b))
    assert cls.capability == "stale_b"
