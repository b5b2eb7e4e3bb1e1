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
