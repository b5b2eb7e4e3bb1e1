"""The τ² ids register without importing tau2, and making one without tau2 says how to install it."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

from tests.tau2.conftest import requires_tau2
from trace_train.paths import REPO_ROOT

IDS = ["trace/tau2-airline-v0", "trace/tau2-retail-v0", "trace/tau2-airline-llm-v0", "trace/tau2-retail-llm-v0"]

_BLOCK_TAU2 = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tau2" or name.startswith("tau2."):
            raise ImportError("blocked for the test: no tau2")
sys.meta_path.insert(0, Block())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_ids_list_without_importing_tau2():
    proc = _run("import sys, trace_envs; print(trace_envs.trace_env_ids()); print('tau2' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    listed, imported = proc.stdout.strip().splitlines()[-2:]
    assert all(i in listed for i in IDS) and imported == "False"


def test_llm_user_ids_are_nondeterministic():
    import trace_envs  # noqa: F401

    assert all(gym.spec(i).nondeterministic == i.endswith("-llm-v0") for i in IDS)


def test_make_without_tau2_raises_install_hint():
    code = _BLOCK_TAU2 + """
import gymnasium as gym, trace_envs
assert "trace/tau2-retail-v0" in trace_envs.trace_env_ids()
try:
    gym.make("trace/tau2-retail-v0")
except ImportError as exc:
    print("ERR", exc)
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    assert "ERR" in proc.stdout and "install trace-rl[tau2]" in proc.stdout


@pytest.mark.tau2
@requires_tau2
def test_fresh_process_make_with_module_prefix():
    code = """
import gymnasium as gym
env = gym.make("trace_envs:trace/tau2-retail-v0", split="test")
obs, info = env.reset(seed=3)
print(obs[0]["role"], len(info["tools"]), info["task"]["domain"])
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "assistant 15 retail"
