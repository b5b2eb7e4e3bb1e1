"""Ninth review of the SWE env's local sandbox and Docker backend: one test per finding.

A. the submission's diff ignores the agent's ``.git/config`` (external diff, prefixes, textconv, colour);
B. a checkout keeps no history past its base commit (branches, tags, reflogs, unreachable objects);
C. trace-rl's own packages are hidden in the jail when a read-only bind would show them;
D. the total-memory watchdog counts shared anonymous memory;
E. the Docker backend reads files and diffs whole (no truncation, stdout only, return code checked);
F. bad limits are one-line ``ValueError``s at construction; an undiffable workspace scores 0, never raises.
"""

from __future__ import annotations

import mmap
import os
import subprocess
from pathlib import Path

import gymnasium as gym
import pytest

import trace_envs
from trace_envs.core.parsing import format_tool_call
from trace_envs.swe import confinement as conf
from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.docker_backend import DockerBackend
from trace_envs.swe.editor import Editor
from trace_envs.swe.env import SWEBenchEnv
from trace_envs.swe.host_git import GIT_IDENTITY
from trace_envs.swe.sandbox import DiffError, SandboxLimits, materialize
from trace_envs.swe.store import PristineStore
from trace_envs.swe.task import SWETask

AVAIL = conf.available()
needs_jail = pytest.mark.skipif(not AVAIL.mount_namespace, reason=f"no mount namespace here: {AVAIL.errors}")
INVENTORY = "local__inventory-1"


def sh(cwd: Path, cmd: str) -> str:
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(cmd, shell=True, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def step(env, name: str, args: dict):
    return env.step(format_tool_call(name, args))


# -- A. the diff ignores the agent's git configuration ----------------------------------------------
def test_diff_ignores_the_agents_git_config(local_tasks):
    backend = LocalBackend()
    backend.start(local_tasks[0])
    try:
        res = backend.run(
            "printf '#!/bin/sh\\necho FORGED\\n' > .git/ext.sh && chmod +x .git/ext.sh && "
            "git config diff.external \"$PWD/.git/ext.sh\" && git config diff.noprefix true && "
            "git config color.ui always && git config diff.shout.textconv 'tr a-z A-Z' && "
            "echo '*.py diff=shout' > .git/info/attributes && echo '# touched' >> $(git ls-files '*.py' | head -1) "
            "&& git ls-files '*.py' | head -1")
        assert res.returncode == 0, res.output
        path = res.output.strip()
        patch = backend.diff()
    finally:
        backend.close()
    assert "FORGED" not in patch and "\x1b[" not in patch
    assert patch.startswith(f"diff --git a/{path} b/{path}\n"), patch[:200]
    assert f"--- a/{path}\n+++ b/{path}\n" in patch and "\n+# touched\n" in patch


# -- B. no future history in a checkout --------------------------------------------------------------
def test_checkout_keeps_no_history_past_the_base_commit(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    sh(src, "git init -q -b main && git add -A && git commit -qm base")
    base = sh(src, "git rev-parse HEAD").strip()
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    sh(src, "git commit -qam 'Fix add (#42)' && git tag v1.0.1 && git branch fix-branch")
    fix = sh(src, "git rev-parse HEAD").strip()
    dest = tmp_path / "checkout"
    assert materialize(src, dest, base, PristineStore(tmp_path / "store")) == base
    assert sh(dest, "git for-each-ref") == ""  # no branch, tag or remote points past the base
    assert sh(dest, "git log --all --reflog --format=%H").split() == [base]
    assert fix not in sh(dest, "git cat-file --batch-all-objects --batch-check")  # not even unreachable
    assert "a - b" in (dest / "calc.py").read_text()


# -- C. trace-rl's packages are hidden in the jail ----------------------------------------------------
@needs_jail
def test_jail_hides_trace_rl_packages_under_a_bound_directory(local_tasks):
    pkg = Path(trace_envs.__file__).resolve().parent
    checkout = pkg.parent  # bound read-only, like a venv's site-packages holding a wheel install
    templates = pkg / "swe" / "local_tasks" / "templates.py"
    assert templates.is_file()
    visible = next(p for p in sorted(checkout.iterdir()) if p.is_file())
    backend = LocalBackend(SandboxLimits(ro_paths=(str(checkout),)))
    backend.start(local_tasks[0])
    try:
        res = backend.run(f"ls -A {pkg} | wc -l; cat {templates} | head -c 20; echo; head -c 5 {visible} | wc -c; "
                          "python -c 'print(6 * 7)'")
    finally:
        backend.close()
    lines = res.output.splitlines()
    assert lines[0].strip() == "0", res.output  # the package directory is empty in the jail
    assert "No such file" in res.output
    assert "5" in lines and "42" in lines, res.output  # the rest of the bound directory and python still work


def test_jail_shows_a_package_directory_named_in_ro_paths():
    pkg = str(Path(trace_envs.__file__).resolve().parent)
    hidden = conf.jail_layout(Path("/r"), Path("/h"), Path("/t"), (str(Path(pkg).parent),), Path("/E"))["ro"]
    assert ["/E", pkg] in hidden
    shown = conf.jail_layout(Path("/r"), Path("/h"), Path("/t"), (pkg,), Path("/E"))["ro"]
    assert ["/E", pkg] not in shown and [pkg, pkg] in shown  # asked for explicitly (the env validator's probe)


# -- D. shared anonymous memory counts -----------------------------------------------------------------
def test_memory_count_includes_shared_anonymous_memory():
    me = {os.getpid()}
    before = conf.anon_memory_bytes(me)
    size = 64 << 20
    shared = mmap.mmap(-1, size)  # MAP_SHARED | MAP_ANONYMOUS
    try:
        shared[::4096] = b"x" * len(range(0, size, 4096))
        grown = conf.anon_memory_bytes(me) - before
    finally:
        shared.close()
    assert grown >= size * 0.9, grown


def test_total_memory_limit_stops_shared_mappings(local_tasks):
    hog = ("python -c \"import mmap, sys, time; m = mmap.mmap(-1, 150 << 20); m[::4096] = b'x' * len(m[::4096]); "
           "time.sleep(4); print('done', sys.argv[1])\"")
    backend = LocalBackend(SandboxLimits(timeout_s=30, memory_mb=300))
    backend.start(local_tasks[0])
    try:
        res = backend.run(" ".join(f"{hog} {i} &" for i in range(3)) + " wait")
    finally:
        backend.close()
    assert res.killed == "memory" and "killed: memory" in res.output, res.output


# -- E. the Docker backend reads and diffs whole (a stand-in `docker` CLI; no daemon) ---------------------
@pytest.fixture()
def fake_docker(fake_docker_cli):
    testbed = fake_docker_cli / "testbed"
    src = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(800))  # ~22 kB, > max_output_chars
    (testbed / "big.py").write_text(src)
    (testbed / "blob.dat").write_bytes(b"\xff\xfe binary \x00\n")
    sh(testbed, "git init -q && git add -A && git commit -qm base")
    backend = DockerBackend()
    backend.container = "fake"
    backend.task = SWETask("x__y-1", "x/y", sh(testbed, "git rev-parse HEAD").strip(), "p")
    yield backend, testbed, src
    backend.container = None  # nothing to `docker rm`


def test_docker_editor_keeps_files_longer_than_the_output_limit(fake_docker):
    backend, testbed, src = fake_docker
    assert len(src) > backend.limits.max_output_chars
    assert backend.read_file("big.py") == src
    Editor(backend)("str_replace", "big.py", old_str="    return 0\n", new_str="    return -1\n")
    assert (testbed / "big.py").read_text() == src.replace("    return 0\n", "    return -1\n", 1)
    with pytest.raises(FileNotFoundError):
        backend.read_file("missing.py")
    with pytest.raises(ValueError, match="not UTF-8"):
        backend.write_file("blob.dat", "text")
    assert (testbed / "blob.dat").read_bytes() == b"\xff\xfe binary \x00\n"


def test_docker_diff_is_whole_and_fails_loudly(fake_docker):
    backend, testbed, src = fake_docker
    (testbed / "big.py").write_text(src.replace("return", "return  "))
    sh(testbed, "git config diff.external /nonexistent && git config diff.noprefix true")
    patch = backend.diff()
    assert len(patch) > 2 * backend.limits.max_output_chars and "elided" not in patch
    assert patch.startswith("diff --git a/big.py b/big.py\n") and patch.count("\n+    return  ") == 800
    sh(testbed, "rm -rf .git")
    with pytest.raises(DiffError, match="could not diff"):
        backend.diff()


# -- F. bad kwargs and an undiffable workspace --------------------------------------------------------
@pytest.mark.parametrize("kwargs, name", [
    ({"command_timeout_s": float("nan")}, "command_timeout_s"),
    ({"command_timeout_s": float("inf")}, "command_timeout_s"), ({"command_timeout_s": 0}, "command_timeout_s"),
    ({"eval_timeout_s": 0}, "eval_timeout_s"),
    ({"eval_timeout_s": float("nan")}, "eval_timeout_s"), ({"eval_timeout_s": "60"}, "eval_timeout_s"),
    ({"memory_mb": "2048"}, "memory_mb"), ({"ro_paths": "/usr"}, "ro_paths"),
    ({"ro_paths": ["usr"]}, "ro_paths"), ({"backend": "bogus"}, "backend"),
])
def test_bad_kwargs_are_one_line_errors_at_make(kwargs, name):
    with pytest.raises(ValueError, match=name) as err:
        gym.make("trace/swebench-v0", **kwargs)
    assert "\n" not in str(err.value)


def test_sandbox_limits_refuse_non_finite_values():
    for bad in ({"timeout_s": float("nan")}, {"timeout_s": float("inf")}, {"memory_mb": 1.5}, {"ro_paths": "/usr"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SandboxLimits(**bad)


def test_submit_after_removing_git_scores_zero():
    env = SWEBenchEnv(dataset="local", backend="local")
    try:
        env.reset(seed=0, options={"instance_id": INVENTORY})
        step(env, "bash", {"command": "rm -rf .git"})
        _, reward, terminated, _, info = step(env, "submit", {})
    finally:
        env.close()
    assert reward == 0.0 and terminated and info["resolved"] is False
    assert info["patch"] == "" and "could not diff" in info["diff_error"]
    assert info["eval"]["resolved"] is False and "no submission" in info["eval"]["error"]
