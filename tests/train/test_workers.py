"""``run_jobs``: a graph of jobs in forked one-thread workers, results back by key, failures loud; the stage
runner's records survive stages that run at once in several processes."""

import json
import os
import time

import pytest
import torch

from trace_train.pipeline.stage_runner import StageRunner
from trace_train.threads import torch_threads
from trace_train.workers import Job, JobFailed, run_jobs


def _diamond(log=None):
    def step(key, value):
        def fn(done):
            if log is not None:
                log.append(key)
            return {"key": key, "value": value(done), "pid": os.getpid(), "threads": torch.get_num_threads(),
                    "asked": torch_threads(2)}
        return fn
    return [Job("a", step("a", lambda d: 1), cost=1),
            Job("b", step("b", lambda d: 10), cost=5),
            Job("c", step("c", lambda d: d["a"]["value"] + d["b"]["value"]), after=("a", "b")),
            Job("d", step("d", lambda d: d["c"]["value"] * 2), after=("c",))]


def test_sequential_jobs_run_here_in_order():
    log = []
    results = run_jobs(_diamond(log), workers=1)
    assert log == ["a", "b", "c", "d"]
    assert results["d"]["value"] == 22 and {r["pid"] for r in results.values()} == {os.getpid()}
    assert results["a"]["asked"] == 2  # no cap outside a worker: a config's threads are taken as they are


def test_forked_jobs_wait_for_their_inputs_and_run_on_one_thread():
    results = run_jobs(_diamond(), workers=2)
    assert results["c"]["value"] == 11 and results["d"]["value"] == 22
    pids = {r["pid"] for r in results.values()}
    assert os.getpid() not in pids and len(pids) == 4  # one fresh worker per job
    assert all(r["threads"] == 1 and r["asked"] == 1 for r in results.values())  # threads: 2 becomes 1


def test_independent_jobs_run_at_once():
    def sleeper(_):
        start = time.time()
        time.sleep(0.5)
        return start, time.time()
    results = run_jobs([Job(f"s{i}", sleeper) for i in range(2)], workers=2)
    (a0, a1), (b0, b1) = results["s0"], results["s1"]
    assert max(a0, b0) < min(a1, b1)  # the two spans overlap


def test_a_failing_job_fails_the_call_with_its_traceback_and_stops_the_rest(tmp_path):
    marker = tmp_path / "late"

    def fails(_):
        raise ValueError("bad capability env")

    def slow(_):
        time.sleep(30)
        marker.write_text("finished")

    start = time.time()
    with pytest.raises(JobFailed, match="(?s)job 'broken' failed in its worker.*ValueError: bad capability env"):
        run_jobs([Job("slow", slow, cost=2), Job("broken", fails), Job("never", lambda d: 1, after=("broken",))],
                 workers=2)
    assert time.time() - start < 20 and not marker.exists()  # the slow job was stopped, not awaited


def test_a_worker_that_dies_is_reported():
    with pytest.raises(JobFailed, match="job 'dies': its worker exited with code 7"):
        run_jobs([Job("dies", lambda d: os._exit(7)), Job("fine", lambda d: 1)], workers=2)


def _cannot_rebuild(name):
    raise RuntimeError(f"cannot rebuild {name}")


class _OnlyTheWorkerRebuilds:
    """Pickles in the worker, fails to unpickle in the parent (as a class only the worker has would)."""

    def __reduce__(self):
        return (_cannot_rebuild, ("it",))


def test_a_result_that_cannot_be_received_is_reported_with_its_job():
    with pytest.raises(JobFailed, match="job 'evaluate/base': its result could not be received: RuntimeError"):
        run_jobs([Job("evaluate/base", lambda d: _OnlyTheWorkerRebuilds()), Job("fine", lambda d: 1)], workers=2)


def test_job_lists_are_checked():
    with pytest.raises(ValueError, match="job keys repeat: \\['a'\\]"):
        run_jobs([Job("a", lambda d: 1), Job("a", lambda d: 2)])
    with pytest.raises(ValueError, match="job 'b' waits for \\['c'\\], which are not listed before it"):
        run_jobs([Job("b", lambda d: 1, after=("c",)), Job("c", lambda d: 2)])


def test_stages_run_in_workers_keep_every_record(tmp_path):
    runner = StageRunner(tmp_path / "run", meta={"target_env": "trace/retail-sim-v0"})
    runner.run("first", "h0", lambda d: {"n": 0})

    def stages(prefix):
        def fn(_):
            for i in range(15):
                runner.run(f"{prefix}/{i}", f"h{i}", lambda d, i=i: (d / "out.txt").write_text(str(i)) and {"n": i})
            return prefix
        return fn

    run_jobs([Job("x", stages("x")), Job("y", stages("y"))], workers=2)
    state = json.loads((tmp_path / "run" / "pipeline.json").read_text())
    names = {"first"} | {f"{p}/{i}" for p in "xy" for i in range(15)}
    assert set(state["stages"]) == names and state["target_env"] == "trace/retail-sim-v0"
    assert all(s["status"] == "done" and len(s["spans"]) == 1 for s in state["stages"].values())
    assert "x/3" not in runner.state["stages"]  # this process learns of them when it reads the file again
    runner.refresh()
    assert runner.outputs_of("y/14") == {"n": 14}
    # a rerun here skips every stage the workers finished
    ran = []
    runner.run("x/3", "h3", lambda d: ran.append(1) or {})
    assert not ran


def test_policies_evaluated_in_workers_score_as_in_one_process(tmp_path):
    from trace_train.evaluation.run import evaluate_policies
    from trace_train.policies import PolicySpec

    policies = {"oracle": PolicySpec(kind="oracle", name="oracle"),
                "expert": PolicySpec(kind="expert", name="expert", knobs={"precondition": 1.0, "structured": 1.0})}
    here = evaluate_policies(policies, "trace/retail-sim-v0", "test", 12, out_dir=tmp_path / "one")
    forked = evaluate_policies(policies, "trace/retail-sim-v0", "test", 12, out_dir=tmp_path / "two", workers=2)
    assert forked == here and list(forked) == ["oracle", "expert"]
    assert here["oracle"]["overall"]["rate"] > here["expert"]["overall"]["rate"]  # two different policies
    for name in policies:  # each worker wrote its policy's episodes
        assert ((tmp_path / "two" / f"trajectories_{name}.jsonl").read_text()
                == (tmp_path / "one" / f"trajectories_{name}.jsonl").read_text())


def test_a_worker_runs_the_jobs_its_job_starts_itself():
    def outer(_):
        inner = run_jobs([Job("i0", lambda d: os.getpid()), Job("i1", lambda d: os.getpid())], workers=2)
        return os.getpid(), set(inner.values())

    results = run_jobs([Job("outer", outer), Job("other", lambda d: 0)], workers=2)
    pid, inner_pids = results["outer"]
    assert inner_pids == {pid}  # no worker of a worker: two workers stay two processes
