"""Task sources: task repos (valid for swebench itself), JSONL round trip, HF offline error."""

from __future__ import annotations

import json

import pytest

from trace_envs.swe.task import SWETask, load_hf, load_tasks


def test_task_repo_passes_swebench_checks(task_repo):
    checks = pytest.importorskip("swebench.task.checks")
    from swebench.task.repo import load_task_repo as swebench_load

    assert checks.check_task_repo(task_repo) == []
    rows = {r["instance_id"]: r for r in swebench_load(task_repo)}
    ours = {t.instance_id: t for t in load_tasks(task_repo)}
    assert set(rows) == set(ours)
    for iid, row in rows.items():
        assert row["patch"] == ours[iid].patch and row["FAIL_TO_PASS"] == ours[iid].fail_to_pass


def test_build_is_deterministic(task_repo, tmp_path):
    from trace_envs.swe.local_tasks import build_task_repo

    again = load_tasks(build_task_repo(tmp_path / "again"))
    first = load_tasks(task_repo)
    assert [(t.instance_id, t.base_commit, t.patch, t.test_patch) for t in again] == [
        (t.instance_id, t.base_commit, t.patch, t.test_patch) for t in first]


def test_jsonl_round_trip(local_tasks, tmp_path):
    path = tmp_path / "instances.jsonl"
    rows = []
    for t in local_tasks:
        row = t.to_row()
        row["repo_path"] = str(t.repo_path)
        rows.append(row)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    loaded = load_tasks(path)
    assert [t.instance_id for t in loaded] == [t.instance_id for t in local_tasks]
    assert all(isinstance(t.fail_to_pass, list) and t.repo_path for t in loaded)
    assert loaded[0].fail_to_pass == local_tasks[0].fail_to_pass
    with pytest.raises(ValueError, match="lacks"):
        SWETask.from_row({"instance_id": "x"})


def test_jsonl_with_repos_dir(local_tasks, tmp_path):
    import shutil

    task = local_tasks[0]
    shutil.copytree(task.repo_path, tmp_path / "repos" / task.repo.replace("/", "__"))
    (tmp_path / "one.jsonl").write_text(json.dumps(task.to_row()) + "\n")
    loaded = load_tasks(tmp_path / "one.jsonl", repos_dir=tmp_path / "repos")
    assert loaded[0].repo_path == tmp_path / "repos" / "local__inventory"


def test_hf_source_fails_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="JSONL"):
        load_hf("verified")
