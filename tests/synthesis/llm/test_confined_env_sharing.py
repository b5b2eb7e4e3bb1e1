"""Env instances of one LLM-written module in one host process share confined worker processes (up to a cap per
worker), yet play exactly as separate in-process envs; a fault of a shared worker stops every instance it hosted
with a clear error, and each then resets onto a live worker; no worker outlives its last instance. A worker that
died unseen never fails the instance about to be built on it, a killed worker leaves the registry at once, and an
instance leaves a worker near its limits at its next reset."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import time

import pytest

from tests.synthesis.llm.llm_env_modules import GOOD
from tests.synthesis.llm.test_confined_env import (
    SORRY_LOOP,
    _episode,
    _fake_worker,
    _gone,
    _module,
    _oracle_reward,
    _worker_interpreters,
    _worker_python,
)
from trace_envs.swe import confinement as conf
from trace_envs.synthesis.llm import worker_pool
from trace_envs.synthesis.llm.confined_env import ConfinedEnv, WorkerError
from trace_envs.synthesis.llm.loader import load_env_class, make_env
from trace_envs.synthesis.llm.worker_client import Worker

ERRORS = ["Hello, can you help?", '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
          '<tool_call>{"name": "find_user_id_by_email", "arguments": {"email": "x@y.z"}}</tool_call>',
          "I'm sorry.", "###STOP###"]
TRUNCATED = ['<tool_call>{"name": "get_order_details", "arguments": {}}</tool_call>'] * 8


def _close(*envs) -> None:
    for env in envs:
        env.close()


def test_instances_of_one_module_share_one_worker(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    before = _worker_interpreters()
    envs = [ConfinedEnv(path, sha, {"domain": "retail-sim"}) for _ in range(4)]
    envs.append(ConfinedEnv(path, sha, {"domain": "retail-sim", "max_steps": 3}))  # its own kwargs, same worker
    try:
        assert len({id(e._worker) for e in envs}) == 1 and len({e._id for e in envs}) == 5
        assert len(_worker_interpreters() - before) == 1
        assert {_worker_python(e) for e in envs} == _worker_interpreters() - before
        assert [e.max_steps for e in envs] == [envs[0].max_steps] * 4 + [3]
        for seed, env in enumerate(envs):
            obs, _ = env.reset(seed=seed)
            assert "email" in obs[0]["content"]
    finally:
        _close(*envs)


def _interleaved(envs, seeds, scripts) -> list[list[str]]:
    """Play one episode on each env at once, one step of each in turn; what each showed (as ``_episode``)."""
    shown, todo = [], []
    for env, seed, script in zip(envs, seeds, scripts):
        obs, info = env.reset(seed=seed)
        turns = env.unwrapped.oracle_turns()
        shown.append([json.dumps([obs, info], sort_keys=True), json.dumps(turns, sort_keys=True)])
        todo.append(list(turns if script == "oracle" else script))
    live = set(range(len(envs)))
    while live:
        for i in sorted(live):
            if not todo[i]:
                live.discard(i)
                continue
            obs, reward, terminated, truncated, info = envs[i].step(todo[i].pop(0))
            shown[i].append(json.dumps([obs, reward, terminated, truncated, info], sort_keys=True))
            if terminated or truncated:
                todo[i] = []
    for i, env in enumerate(envs):
        shown[i].append(json.dumps(env.unwrapped.transcript, sort_keys=True))
    return shown


def test_co_hosted_instances_play_as_separate_in_process_envs(tmp_path):
    """Three instances on one worker, stepped in turn, show exactly what three separate in-process envs show."""
    path, sha = _module(tmp_path, GOOD)
    proxies = [ConfinedEnv(path, sha, {"domain": "retail-sim"}) for _ in range(3)]
    plain = load_env_class(path, sha)(domain="retail-sim")
    try:
        assert len({id(p._worker) for p in proxies}) == 1
        for seeds, scripts in (([0, 1, 2], ["oracle", ERRORS, TRUNCATED]), ([2, 0, 7], [TRUNCATED, "oracle", ERRORS]),
                               ([4, 4, 4], ["oracle", ["###STOP###"], ERRORS])):
            shown = _interleaved(proxies, seeds, scripts)
            alone = [_episode(plain, seed, script) for seed, script in zip(seeds, scripts)]
            assert shown == alone, (seeds, scripts)
            assert len({a[-1] for a in alone}) == 3  # three different stories, never one shown thrice
    finally:
        _close(*proxies)
        plain.close()


@pytest.mark.parametrize("fault", ["hang", "crash"])
def test_a_fault_of_a_shared_worker_stops_every_instance_then_each_resets(tmp_path, fault):
    path, sha = _module(tmp_path, SORRY_LOOP)
    a, b, c = envs = [ConfinedEnv(path, sha, call_timeout_s=1.5) for _ in range(3)]
    try:
        worker = a._worker
        assert b._worker is worker and c._worker is worker
        for seed, env in enumerate(envs):
            env.reset(seed=seed)
        old = a.worker_pids
        if fault == "hang":
            a.step("I'm sorry, I cannot help with that.")
            with pytest.raises(TimeoutError, match=r"cap_llm_source\.py: the confined worker .* did not answer step "
                                                   r"within 1\.5 s; it was stopped"):
                a.step("###STOP###")  # verify loops on 'sorry'
            what = r"did not answer step within 1\.5 s"
        else:
            os.kill(_worker_python(a), signal.SIGKILL)
            with pytest.raises(WorkerError, match=r"cap_llm_source\.py: the confined worker .* exited"):
                a.step("###STOP###")
            what = r"exited (during step|before the step request) \(exit status 137\)"
        assert _gone(old) and worker.dead
        shared = (r"cap_llm_source\.py: the confined worker this env shared with other instances of its module "
                  + what + r" \(in another instance's call\); it was stopped")
        with pytest.raises(WorkerError, match=shared):
            b.step("###STOP###")
        with pytest.raises(WorkerError, match=shared):
            c.oracle_turns()
        for env in envs:  # told once; then, as for the instance whose call failed, reset() is the way on
            with pytest.raises(RuntimeError, match="call reset"):
                env.step("###STOP###")
        for seed, env in enumerate(envs):
            obs, _ = env.reset(seed=seed)
            assert "email" in obs[0]["content"]
        assert a._worker is b._worker is c._worker and a._worker is not worker
        assert a.worker_pids.isdisjoint(old)
        assert _oracle_reward(b) == 1.0
    finally:
        _close(*envs)


def test_the_cap_starts_another_worker(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    before = _worker_interpreters()
    envs = [ConfinedEnv(path, sha, instances_per_worker=2) for _ in range(5)]
    try:
        workers = [e._worker for e in envs]
        assert workers[0] is workers[1] and workers[2] is workers[3] and len({id(w) for w in workers}) == 3
        assert len(_worker_interpreters() - before) == 3
        first = envs[0].worker_pids
        _close(*envs[:2])  # the first worker's last instance: it ends; the others are untouched
        assert _gone(first) and len(_worker_interpreters() - before) == 2
        envs.append(ConfinedEnv(path, sha, instances_per_worker=2))  # room on the third worker
        assert envs[-1]._worker is envs[4]._worker and len(_worker_interpreters() - before) == 2
        for seed, env in enumerate(envs[2:]):
            env.reset(seed=seed)
    finally:
        _close(*envs)
    assert _worker_interpreters() <= before


def test_a_closed_instance_is_dropped_and_no_id_reaches_another_instance(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    a, b = ConfinedEnv(path, sha), ConfinedEnv(path, sha)
    try:
        worker, a_id = a._worker, a._id
        assert b._worker is worker and a_id != b._id
        a.reset(seed=0)
        a.close()
        assert worker.pids() and not a.worker_pids  # b still holds it
        b.reset(seed=1)  # tells the worker that a is gone
        for iid in (a_id, 999):  # an id the host released, or never assigned: the worker serves no env for it
            with pytest.raises(KeyError, match=f"no env instance {iid} in this worker"):
                worker.call("step", iid, {"action": "###STOP###"}, 10.0)
        assert b.step("Hello?")[0]  # the worker went on
    finally:
        _close(a, b)


def test_closing_all_instances_and_collection_leave_no_worker(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    before = _worker_interpreters()
    envs = [ConfinedEnv(path, sha, instances_per_worker=3) for _ in range(6)]
    pids = set().union(*(e.worker_pids for e in envs))
    dirs = {e._worker.box.tmp for e in envs}
    assert len(_worker_interpreters() - before) == 2 and len(dirs) == 2 and all(d.is_dir() for d in dirs)
    for env in envs[:3]:
        env.reset(seed=0)
        env.close()
    for env in envs[3:]:
        env.reset(seed=0)
    del envs, env
    gc.collect()
    assert _gone(pids) and not any(d.exists() for d in dirs) and _worker_interpreters() <= before
    assert not [w for w in worker_pool.live_workers() if w.label == path]


def test_a_forked_copy_never_uses_its_parents_worker(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha)
    env.reset(seed=0)
    parent = env.worker_pids
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened on the pipe, then leave without running the parent's exit hooks
        out = {}
        try:
            try:
                env.step("Hello?")
            except RuntimeError as exc:
                out["step"] = str(exc)
            env.reset(seed=0)
            out["pids"] = sorted(env.worker_pids)
            env.close()
            out["gone"] = _gone(set(out["pids"]))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            out["error"] = repr(exc)
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = json.loads(fh.read())
    os.waitpid(pid, 0)
    try:
        assert "error" not in out, out
        assert "copied into another process" in out["step"]
        assert out["pids"] and parent.isdisjoint(out["pids"]) and out["gone"]
        assert env.worker_pids == parent  # the parent's worker was neither used nor killed by the child
        assert "email" in env.reset(seed=0)[0][0]["content"]
    finally:
        env.close()
    assert _gone(parent)


def test_a_worker_near_its_limits_takes_no_more_instances(tmp_path, monkeypatch):
    """Instances that join a worker which has used half its CPU time (here: any, with the limit at 0) or memory
    would soon meet its limits with it: each new instance goes to a worker of its own."""
    path, sha = _module(tmp_path, GOOD)
    monkeypatch.setattr(worker_pool, "WORKER_CPU_S", 0)
    envs = [ConfinedEnv(path, sha) for _ in range(3)]
    try:
        assert len({id(e._worker) for e in envs}) == 3
    finally:
        _close(*envs)


def _registered(worker: Worker) -> bool:
    return any(w is worker for ws in list(worker_pool._workers.values()) for w in ws)


def _die_unseen(worker: Worker) -> None:
    """Kill the worker's interpreter and wait until its launcher has exited too, all unseen by the host: no call
    runs and the launcher is not reaped, so the host still holds the worker as live."""
    (python,) = _worker_interpreters(worker.pids())
    os.kill(python, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while True:
        with open(f"/proc/{worker.proc.pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        assert time.monotonic() < deadline, "the launcher outlived its worker"
        time.sleep(0.01)
    assert not worker.dead and worker.proc.returncode is None


def _dying_at_new(monkeypatch) -> dict:
    """From now on the worker chosen for a ``new`` request dies unseen just before it (``plan["left"]`` times);
    ``plan["killed"]``: those workers."""
    plan = {"left": 0, "killed": []}
    real = Worker.call

    def call(self, op, iid, payload, timeout_s):
        if op == "new" and plan["left"] > 0:
            plan["left"] -= 1
            plan["killed"].append(self)
            _die_unseen(self)
        return real(self, op, iid, payload, timeout_s)

    monkeypatch.setattr(Worker, "call", call)
    return plan


def test_a_worker_that_died_unseen_never_fails_the_instance_built_on_it(tmp_path, monkeypatch):
    """A dead worker's launcher briefly outlives it, so the worker chosen for a new instance may be dead already:
    the instance is built on a fresh worker instead, both at make time and at a reset, and the dead worker is
    dropped; the instances it hosted learn of it on their next call."""
    path, sha = _module(tmp_path, GOOD)
    plan = _dying_at_new(monkeypatch)
    a = ConfinedEnv(path, sha)
    envs = [a]
    try:
        shared = a._worker
        plan["left"] = 1
        b = ConfinedEnv(path, sha)  # chosen: a's worker, which dies before taking b's new request
        envs.append(b)
        assert plan["killed"] == [shared] and shared.dead and not _registered(shared)
        assert b._worker is not shared and not b._worker.dead and _registered(b._worker)
        with pytest.raises(WorkerError, match=r"cap_llm_source\.py: the confined worker this env shared with other "
                                              r"instances of its module exited before the new request \(exit status "
                                              r"137\) \(in another instance's call\); it was stopped"):
            a.step("Hello?")
        plan["left"] = 1
        a.reset(seed=0)  # chosen: b's worker, which dies too: a is built on a fresh one
        assert plan["killed"][1] is b._worker and b._worker.dead and not a._worker.dead
        with pytest.raises(WorkerError, match="exited before the new request"):
            b.step("Hello?")
        b.reset(seed=1)
        assert b._worker is a._worker and len(_worker_interpreters(a.worker_pids)) == 1
        assert _oracle_reward(a) == 1.0
    finally:
        _close(*envs)


def test_a_worker_stopped_between_its_choice_and_new_is_replaced(tmp_path, monkeypatch):
    """Another instance's fault (here: a hang, as in another thread) may stop the chosen worker after the new
    instance's id was reserved on it and before its new request: that instance is built on a fresh worker."""
    path, sha = _module(tmp_path, GOOD)
    a = ConfinedEnv(path, sha)
    try:
        shared, pids = a._worker, a.worker_pids
        real = Worker.reserve

        def reserve(self):
            iid = real(self)
            if self is shared and not self.dead:
                self._fail("did not answer step within 1.5 s", timeout=True)  # what a's hung step would do
            return iid

        monkeypatch.setattr(Worker, "reserve", reserve)
        b = ConfinedEnv(path, sha)
        try:
            assert shared.dead and _gone(pids) and not _registered(shared) and b._worker is not shared
            assert "email" in b.reset(seed=0)[0][0]["content"]
            with pytest.raises(WorkerError, match=r"did not answer step within 1\.5 s \(in another instance's "
                                                  r"call\); it was stopped and this call was not made"):
                a.step("Hello?")
        finally:
            b.close()
    finally:
        a.close()


def test_an_env_whose_fresh_worker_dies_too_fails_with_a_clear_error(tmp_path, monkeypatch):
    path, sha = _module(tmp_path, GOOD)
    before = _worker_interpreters()
    plan = _dying_at_new(monkeypatch)
    plan["left"] = 2
    with pytest.raises(WorkerError, match=r"cap_llm_source\.py: this env could not be built: the confined worker "
                                          r"chosen for it exited before the new request \(exit status 137\), and "
                                          r"the fresh worker started in its place failed too: .* exited before the "
                                          r"new request"):
        ConfinedEnv(path, sha)
    assert len(plan["killed"]) == 2 and all(w.dead and not _registered(w) for w in plan["killed"])
    assert _worker_interpreters() <= before


def test_a_worker_found_exited_between_calls_is_stopped_and_dropped(tmp_path):
    path, sha = _module(tmp_path, GOOD)
    a = ConfinedEnv(path, sha)
    b = None
    try:
        shared, pids = a._worker, a.worker_pids
        _die_unseen(shared)
        assert _registered(shared)
        b = ConfinedEnv(path, sha)  # choosing a worker finds it exited: it is stopped and forgotten now
        assert shared.dead and not _registered(shared) and _gone(pids) and b._worker is not shared
        with pytest.raises(WorkerError, match=r"exited \(exit status 137\) \(found between calls\); it was "
                                              r"stopped and this call was not made"):
            a.step("Hello?")
        a.reset(seed=0)
        assert a._worker is b._worker
    finally:
        _close(a, *([b] if b else []))


def test_a_killed_worker_leaves_the_registry_and_frees_its_buffer(tmp_path, monkeypatch):
    """A worker killed for a reply over 16 MB held those bytes: they and the worker are dropped at once, not when
    the module is next attached."""
    _fake_worker(monkeypatch, "sys.stdout.write('x' * (17 * 2**20)); sys.stdout.flush(); time.sleep(60)")
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha, call_timeout_s=20)
    try:
        worker = env._worker
        assert _registered(worker)
        with pytest.raises(WorkerError, match="sent a reply to step over the 16,777,216-byte limit"):
            env.step("hello")
        assert worker.dead and len(worker.buf) == 0 and not _registered(worker)
    finally:
        env.close()


def test_killing_a_worker_never_waits_without_a_bound(tmp_path, monkeypatch):
    """``release`` may kill the worker, possibly from the garbage collector: even a launcher that will not be
    reaped (here: every wait times out) holds it up for a bounded time only."""
    path, sha = _module(tmp_path, GOOD)
    env = ConfinedEnv(path, sha)
    worker = env._worker
    proc, pids = worker.proc, env.worker_pids
    waits = []

    def wait(timeout=None):
        waits.append(timeout)
        if timeout is None:
            raise AssertionError("an unbounded wait for the worker's launcher")
        raise subprocess.TimeoutExpired(proc.args, timeout)

    monkeypatch.setattr(proc, "wait", wait)
    monkeypatch.setattr(proc, "poll", lambda: None)
    start = time.monotonic()
    try:
        env.close()
        assert worker.dead and waits and None not in waits and time.monotonic() - start < 15
    finally:
        monkeypatch.undo()
        proc.wait(timeout=20)
    deadline = time.monotonic() + 10  # none runs (killed, maybe still exiting; an orphaned PID 1 may be a zombie)
    while set().union(*map(conf.descendants, pids)):
        assert time.monotonic() < deadline, "a process of the worker outlived its kill"
        time.sleep(0.05)
    assert not worker.box.tmp.exists()


def test_an_instance_on_a_worker_near_its_limits_stays_and_keeps_its_stream(tmp_path, monkeypatch):
    """A worker near its limits takes no new instance, but the ones on it stay: a move would give an instance a fresh
    ``Env``, and ``reset(seed=None)`` after ``reset(seed=s)`` would no longer continue the in-process stream."""
    path, sha = _module(tmp_path, GOOD)
    a, b = envs = [ConfinedEnv(path, sha, instances_per_worker=4) for _ in range(2)]
    plain = make_env(path, sha, confined=False)
    try:
        old = a._worker
        pids = a.worker_pids
        assert b._worker is old
        first = a.reset(seed=123)
        assert first[0] == plain.reset(seed=123)[0]
        monkeypatch.setattr(worker_pool, "_cpu_s", lambda ps: worker_pool.WORKER_CPU_S if ps & pids else 0.0)
        for _ in range(3):
            assert a.reset()[0] == plain.reset()[0]  # same worker, same Env, the stream goes on
        assert a._worker is old and not old.dead
        c = ConfinedEnv(path, sha, instances_per_worker=4)  # a new instance goes elsewhere
        envs.append(c)
        assert c._worker is not old and c.worker_pids.isdisjoint(pids)
    finally:
        _close(*envs)
        plain.close()
