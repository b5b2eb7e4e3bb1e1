"""The static and sandboxed validators: the good module passes, the seven hostile ones are rejected with a
clear reason, and the host process is untouched (nothing imported, registered, written or allocated here)."""

import resource
import sys

import gymnasium as gym
import pytest
from llm_env_modules import (
    ALLOCATES_8GB,
    CONSTANT_REWARD,
    GOOD,
    HIDDEN_IMPORT,
    IMPORTS_SOCKET,
    LOOPS_AT_IMPORT,
    LOOPS_IN_RESET,
    ORACLE_FAILS,
    RENAMES_TOOL,
)

from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.static import check_source
from trace_envs.synthesis.llm.validate import validate_module

LIMITS = ValidationLimits(n_seeds=60, baseline_seeds=20, timeout_s=15)
CAP = "transfer_when_stuck"


def test_good_module_passes_every_check():
    report = validate_module(GOOD, CAP, limits=LIMITS)
    assert report.ok and report.stage == "passed", report.failures
    m = report.measured
    assert m["policies"]["oracle"]["success_rate"] == 1.0
    assert m["policies"]["null"]["mean_reward"] == 0.0 and m["policies"]["random"]["mean_reward"] <= 0.1
    assert m["determinism"]["nondeterministic_seeds"] == [] and m["determinism"]["distinct"] >= 5
    assert report.sandbox["backend"] == "local"


HOSTILE = [
    ("imports_socket", IMPORTS_SOCKET, "static", "import of 'socket' is not allowed"),
    ("hides___import__", HIDDEN_IMPORT, "static", "use of '__builtins__' is not allowed"),
    ("plain___import__", GOOD.replace("        users = sorted(db[\"users\"])\n",
                                      "        __import__(\"o\" + \"s\").system(\"true\")\n"
                                      "        users = sorted(db[\"users\"])\n"),
     "static", "use of '__import__' is not allowed"),
    # a method of the env runs under authoring.METHOD_TIME_LIMIT_S (10 s), the whole probe under the wall clock
    ("loops_in_reset", LOOPS_IN_RESET, "dynamic", "Env.build_task ran past its 10 s time limit"),
    ("loops_at_import", LOOPS_AT_IMPORT, "dynamic", "timed out after 15 s (wall-clock limit) during import"),
    ("allocates_8gb", ALLOCATES_8GB, "dynamic", "memory limit (1024 MB)"),
    ("oracle_fails", ORACLE_FAILS, "dynamic", "the oracle solves 0.0% of 60 seeds"),
    ("renames_a_tool", RENAMES_TOOL, "dynamic", "tool 'lookup_user' is not a tool of the target"),
    ("constant_reward", CONSTANT_REWARD, "dynamic", "the verifier returns a constant reward (1.0)"),
]


@pytest.mark.parametrize("name, source, stage, reason", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_module_is_rejected_and_the_host_untouched(name, source, stage, reason, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modules_before = set(sys.modules)
    ids_before = set(gym.registry)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = validate_module(source, CAP, limits=LIMITS)
    assert not report.ok and report.stage == stage
    assert any(reason in f for f in report.failures), report.failures
    # the host never imported or registered the module, wrote nothing here and did not grow by gigabytes
    assert not any("candidate" in m for m in set(sys.modules) - modules_before)
    assert set(gym.registry) == ids_before
    assert list(tmp_path.iterdir()) == []
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200_000  # KiB


def test_rejection_feedback_names_the_check_and_the_traceback():
    report = validate_module(ALLOCATES_8GB, CAP, limits=LIMITS)
    text = report.feedback()
    assert "rejected at the dynamic check" in text and "MemoryError" in text and "bytearray" in text


@pytest.mark.parametrize("snippet, reason", [
    ("import subprocess\n", "import of 'subprocess'"),
    ("from os import path\n", "import from 'os'"),
    ("import ctypes\n", "import of 'ctypes'"),
    ("import importlib\n", "import of 'importlib'"),
    ("X = open('/etc/passwd')\n", "use of 'open'"),
    ("X = eval('1')\n", "use of 'eval'"),
    ("X = exec\n", "use of 'exec'"),
    ("X = ().__class__\n", "dunder attribute '__class__'"),
    ("X = getattr(1, 'real')\n", "use of 'getattr'"),
])
def test_static_allow_list(snippet, reason):
    report = check_source(snippet + GOOD)
    assert not report.ok and any(reason in p for p in report.problems), report.problems


def test_static_size_limit_and_env_class():
    assert any("too large" in p for p in check_source(GOOD + "#" * 70_000).problems)
    assert any("no class named Env" in p for p in check_source("X = 1\n").problems)
