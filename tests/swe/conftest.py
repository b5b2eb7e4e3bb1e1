"""Shared fixtures: the local task repo is generated once per session (from the templates)."""

from __future__ import annotations

import os

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


# A stand-in `docker` CLI (no daemon): `docker run ...` records its argv in <tmp>/run_argv; `docker exec [-i] -w
# /testbed NAME INNER...` runs INNER in $FAKE_TESTBED on this machine.
FAKE_DOCKER = """#!/bin/bash
if [ "$1" = run ]; then printf '%s\\n' "$@" > "$FAKE_TESTBED/../run_argv"; exit 0; fi
[ "$1" = exec ] || { echo "fake docker: only run and exec" >&2; exit 1; }
shift; [ "$1" = -i ] && shift
shift 3
cd "$FAKE_TESTBED" && exec "$@"
"""


@pytest.fixture()
def fake_docker_cli(tmp_path, monkeypatch):
    """``tmp_path`` with the stand-in ``docker`` first on PATH and an empty ``testbed/`` it runs commands in."""
    bindir, testbed = tmp_path / "bin", tmp_path / "testbed"
    bindir.mkdir()
    testbed.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER)
    (bindir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TESTBED", str(testbed))
    return tmp_path
