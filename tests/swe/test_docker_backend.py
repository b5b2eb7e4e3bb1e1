"""Docker backend: the harness call is built and run correctly (daemon mocked); real runs need a daemon."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest

from trace_envs.swe import backends, docker_backend
from trace_envs.swe.docker_backend import (
    HarnessCall,
    build_harness_call,
    docker_available,
    docker_exec_argv,
    docker_kill_argv,
    docker_run_argv,
    instance_image,
    run_harness,
)


def test_instance_image_naming(local_tasks):
    task = local_tasks[0]
    assert instance_image(task) == task.image == "swebench/sweb.eval.x86_64.local_1776_inventory-1:latest"
    task2 = type(task).from_row({**task.to_row(), "instance_id": "astropy__astropy-12907", "image": ""})
    assert instance_image(task2) == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"


def test_cli_argv():
    assert docker_run_argv("img", "n", network=False)[-4:] == ["img", "tail", "-f", "/dev/null"]
    assert "--network" in docker_run_argv("img", "n", network=False)
    assert "--network" not in docker_run_argv("img", "n", network=True)
    argv = docker_exec_argv("c1", "ls -la; echo 'x'", 7)
    assert argv[:2] == ["docker", "exec"] and argv[-3:-1] == ["bash", "-c"]
    assert "timeout -s KILL 7 bash -lc 'ls -la; echo '\"'\"'x'\"'\"'' " in argv[-1]
    assert "bash -c " in docker_exec_argv("c1", "x", 7, login=False)[-1]
    assert docker_kill_argv("c1")[:5] == ["docker", "exec", "-w", "/testbed", "c1"]


def test_build_harness_call_matches_real_run_instance_signature(local_tasks):
    from swebench.harness.run_evaluation import run_instance
    from swebench.harness.utils import make_test_spec

    task = local_tasks[0]
    client = object()
    call = build_harness_call(task, task.patch, "trace-run-1", 300, client, make_test_spec, run_instance)
    bound = inspect.signature(run_instance).bind(**call.kwargs)  # raises if the call does not fit
    spec = bound.arguments["test_spec"]
    assert spec.instance_id == task.instance_id and spec.FAIL_TO_PASS == task.fail_to_pass
    assert spec.PASS_TO_PASS == task.pass_to_pass and spec.image == task.image
    assert ">>>>> Test Exit Code" in spec.eval_script  # swebench added its exit-code line to our eval.sh
    assert bound.arguments["pred"] == {"instance_id": task.instance_id, "model_name_or_path": "trace-rl",
                                       "model_patch": task.patch}
    assert bound.arguments["client"] is client and bound.arguments["timeout"] == 300
    assert call.log_dir == Path("logs/run_evaluation/trace-run-1/trace-rl") / task.instance_id


def test_build_harness_call_rejects_legacy_rows_on_swebench5(local_tasks):
    from swebench.harness.run_evaluation import run_instance
    from swebench.harness.utils import make_test_spec

    legacy = type(local_tasks[0]).from_row({**local_tasks[0].to_row(), "eval_script": "", "image": ""})
    with pytest.raises(ValueError, match="swebench<5"):
        build_harness_call(legacy, "", "r", 10, object(), make_test_spec, run_instance)


def test_build_harness_call_for_swebench4_signature(local_tasks):
    def run_instance_v4(test_spec, pred, rm_image, force_rebuild, client, run_id, timeout=None, rewrite_reports=False):
        return None

    call = build_harness_call(local_tasks[0], "", "r", 10, "client", lambda row: ("spec", row["instance_id"]),
                              run_instance_v4)
    assert call.kwargs["rm_image"] is False and call.kwargs["force_rebuild"] is False
    inspect.signature(run_instance_v4).bind(**call.kwargs)


def test_run_harness_private_cwd_and_report(local_tasks, tmp_path):
    """A fake run_instance writes what swebench writes (cwd-relative logs); we read it back and leave cwd alone."""
    task = local_tasks[1]
    seen_cwds = []
    log_text = ("\n>>>>> Start Test Output\n" + "\n".join(f"PASSED {t}" for t in task.fail_to_pass + task.pass_to_pass)
                + "\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n")

    def fake_run_instance(test_spec, pred, client, run_id, timeout=None, **_):
        seen_cwds.append(os.getcwd())
        log_dir = Path("logs/run_evaluation") / run_id / pred["model_name_or_path"] / pred["instance_id"]
        log_dir.mkdir(parents=True)
        (log_dir / "test_output.txt").write_text(log_text)
        status = {"FAIL_TO_PASS": {"success": task.fail_to_pass, "failure": []},
                  "PASS_TO_PASS": {"success": task.pass_to_pass, "failure": []}}
        report = {pred["instance_id"]: {"patch_successfully_applied": True, "resolved": True, "tests_status": status}}
        (log_dir / "report.json").write_text(json.dumps(report))

    before = os.getcwd()
    calls = []
    for _ in range(2):
        call = build_harness_call(task, task.patch, f"trace-{len(calls)}", 60, None, lambda r: "spec",
                                  fake_run_instance)
        calls.append(call)
        result = run_harness(call, fake_run_instance, task, task.patch)
        assert result.resolved and result.report.f2p_success == task.fail_to_pass
    assert os.getcwd() == before
    assert len(set(seen_cwds)) == 2 and before not in seen_cwds and not any(Path(c).exists() for c in seen_cwds)


def test_docker_backend_evaluate_uses_unique_run_ids(local_tasks, monkeypatch):
    run_ids = []

    def fake_run_harness(call: HarnessCall, run_instance, task, patch):
        run_ids.append(call.run_id)
        return docker_backend.grade_log(task.instance_id, "", task.fail_to_pass, task.pass_to_pass, patch)

    monkeypatch.setattr(docker_backend, "run_harness", fake_run_harness)
    monkeypatch.setattr(docker_backend, "swebench_harness",
                        lambda: (lambda row: "spec", lambda test_spec, pred, client, run_id, timeout=None: None,
                                 lambda: "client"))
    backend = docker_backend.DockerBackend()
    backend.task = local_tasks[0]
    for _ in range(3):
        assert not backend.evaluate(local_tasks[0].patch).resolved
    assert len(set(run_ids)) == 3 and all(r.startswith("trace-") for r in run_ids)


def test_backend_selection_follows_docker_probe(monkeypatch):
    monkeypatch.setattr(docker_backend, "docker_available", lambda: False)
    assert backends.make_backend("auto").name == "local"
    with pytest.raises(backends.BackendError, match="Docker daemon"):
        backends.make_backend("docker")
    monkeypatch.setattr(docker_backend, "docker_available", lambda: True)
    assert backends.make_backend("auto").name == "docker"


@pytest.mark.docker
@pytest.mark.skipif(not docker_available(), reason="no Docker daemon answers `docker info` on this machine")
def test_real_docker_gold_patch(local_tasks):  # pragma: no cover - needs a daemon and a built image
    backend = docker_backend.DockerBackend()
    task = local_tasks[0]
    backend.start(task)
    try:
        assert backend.evaluate(task.patch).resolved
    finally:
        backend.close()
