"""Shared fixtures: the local task repo is generated once per session (from the templates)."""

from __future__ import annotations

import functools
import os
import subprocess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def task_repo(tmp_path_factory):
    from trace_envs.swe.local_tasks import build_task_repo

    return build_task_repo(tmp_path_factory.mktemp("swe") / "local_tasks")


@pytest.fixture(scope="session")
def local_tasks(task_repo):
    from trace_envs.swe.task import load_task_repo

    return load_task_repo(task_repo)


# A stand-in `docker` CLI (no daemon). A "container" is a PID namespace of its own whose PID 1 is `tail -f /dev/null`,
# as in `docker_run_argv`, so that the script each exec runs (which kills every process there but PID 1) acts as in
# Docker and never on this machine's processes. `docker run ... --name NAME ...` records its argv in <tmp>/run_argv and
# starts NAME; `docker exec [-i] -w /testbed NAME INNER...` runs INNER in NAME's namespaces (starting NAME first if
# need be), in $FAKE_TESTBED, its parent outside (as `docker exec`'s is); `docker rm -f NAME` ends NAME. The host pid
# of each container's PID 1 is in <tmp>/containers/NAME. Not root: in a user namespace of its own (mapped to root).
FAKE_DOCKER = """#!/bin/bash
state="$FAKE_TESTBED/../containers"
userns=(); [ "$(id -u)" = 0 ] || userns=(--user --map-root-user)
enter=(); [ "$(id -u)" = 0 ] || enter=(-U --preserve-credentials)
init_of_own_ns() {  # is host pid $1 a `tail` that is PID 1 of a PID namespace other than ours?
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = tail ] && grep -qE '^NSpid:.*[[:space:]]1$' "/proc/$1/status" &&
    [ "$(readlink "/proc/$1/ns/pid")" != "$(readlink /proc/$$/ns/pid)" ]
}
container() {
  local pid c
  if [ -f "$state/$1" ]; then read -r pid < "$state/$1"; init_of_own_ns "$pid" && { echo "$pid"; return 0; }; fi
  mkdir -p "$state"
  setsid unshare "${userns[@]}" --pid --fork --mount-proc --kill-child tail -f /dev/null </dev/null >/dev/null 2>&1 &
  for _ in $(seq 400); do
    c=$(pgrep -P $! 2>/dev/null)
    if [ -n "$c" ] && init_of_own_ns "$c"; then echo "$c" > "$state/$1"; echo "$c"; return 0; fi
    sleep 0.05
  done
  echo "fake docker: no PID namespace for $1 (unshare --pid failed)" >&2; return 1
}
case "$1" in
  run) printf '%s\\n' "$@" > "$FAKE_TESTBED/../run_argv"; shift
       while [ $# -gt 0 ] && [ "$1" != --name ]; do shift; done; container "$2" > /dev/null || exit 125 ;;
  exec) shift; [ "$1" = -i ] && shift; shift 2
        pid=$(container "$1") || exit 125; shift
        # a command killed by signal N exits 128 + N, as with docker (no shell notice of it on stderr)
        { nsenter -t "$pid" "${enter[@]}" -p -m --wd="$FAKE_TESTBED" "$@" 2>&3 3>&-; } 3>&2 2>/dev/null ;;
  rm) name="${!#}"; [ -f "$state/$name" ] && kill -KILL "$(cat "$state/$name")" 2>/dev/null; rm -f "$state/$name" ;;
  *) echo "fake docker: only run, exec and rm" >&2; exit 1 ;;
esac
"""


@functools.cache
def pid_namespaces_work() -> bool:
    """Can this machine start the stand-in's containers (``unshare --pid``: root, or user namespaces)?"""
    userns = [] if os.getuid() == 0 else ["--user", "--map-root-user"]
    try:
        return subprocess.run(["unshare", *userns, "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture()
def fake_docker_cli(tmp_path, monkeypatch):
    """``tmp_path`` with the stand-in ``docker`` first on PATH and an empty ``testbed/`` it runs commands in; the
    containers it started are ended afterwards."""
    if not pid_namespaces_work():
        pytest.skip("the stand-in docker needs PID namespaces (`unshare --pid`: root or user namespaces), which this "
                    "machine refuses; without one the exec script's kill of all but PID 1 would hit this machine")
    bindir, testbed = tmp_path / "bin", tmp_path / "testbed"
    bindir.mkdir()
    testbed.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER)
    (bindir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TESTBED", str(testbed))
    yield tmp_path
    for pidfile in (tmp_path / "containers").glob("*"):
        try:  # its PID 1: the kernel then kills the rest of the namespace
            os.kill(int(pidfile.read_text()), 9)
        except (OSError, ValueError):
            pass
