"""Shared confined workers: the env instances of one module in one host process share worker processes.

A rollout batch makes one ``ConfinedEnv`` per episode; one worker process each would cost ~60 MB and ~0.5 s of start-
up apiece. Instead :func:`attach` puts an instance on a live worker of the same module (same path, same sha256, same
confinement limits, same cap) that hosts fewer than ``instances_per_worker`` instances, and starts a new worker only
when none has room. A worker whose processes hold half their memory limit, or have used half the CPU time one of them
may use, is :func:`crowded`: it takes no more instances (more of them would soon bring it to its limits, and its fault
stops every instance it hosts); the instances on it stay. A worker may die unseen (its launcher briefly outlives it):
when the ``new`` request of an instance finds its worker dead (it exited, or another instance's fault stopped it), the
instance is built on a fresh worker instead, once. A killed worker leaves the registry at once (``Worker.on_kill``).
The registry is keyed by ``os.getpid()``: a process forked from the host (an async vector env, a forked job) never
sees, uses or kills its parent's workers and starts its own.

A worker's instances share its process and its limits (memory, process count, CPU time) but never an ``Env`` object:
each has its own, named by an id this host assigned; a fault of the worker stops all of them (see
``worker_client.Worker``). A worker is killed when its last instance is released; :func:`_kill_all` at interpreter
exit kills whatever is left.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from typing import Any

from trace_envs.swe import confinement as conf
from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.worker_client import WORKER_CPU_S, Worker, WorkerStopped
from trace_envs.synthesis.llm.worker_protocol import WorkerError

INSTANCES_PER_WORKER = 16  # the default cap of env instances one worker process hosts

_lock = threading.RLock()  # one attach at a time chooses (or starts) a worker and reserves an id on it
# (pid, path, sha256, limits, cap) -> its live workers. Only attach adds to a list (under _lock); a killed worker
# removes itself (_forget, from Worker.kill: under a worker's locks, or from the garbage collector in any thread,
# so it takes no lock; list.remove is atomic). Lists are never replaced, and an empty one is deleted under _lock.
_workers: dict[tuple[Any, ...], list[Worker]] = {}


def attach(label: str, text: str, sha256: str, kwargs: dict[str, Any], limits: ValidationLimits, cap: int,
           start_timeout_s: float) -> tuple[Worker, int, dict[str, Any]]:
    """A new ``Env(**kwargs)`` of module ``label`` on a live worker with room (a new one if none has): the worker,
    the instance's id and its ``new`` reply (``max_steps``, ``max_errors``, ``render_mode``). An error building the
    env is raised (the instance is released: a worker left with none is killed).

    A worker found dead by the ``new`` request (it exited before or while taking it, or another instance's fault
    stopped it since it was chosen) is not this env's error: the instance is built on a fresh worker instead; only
    when that one dies too is :class:`WorkerError` raised."""
    key = (os.getpid(), label, sha256, limits, cap)
    lost: Worker | None = None  # the worker that died under the first try
    while True:
        worker, iid = _reserve(key, label, text, sha256, limits, start_timeout_s, cap, fresh=lost is not None)
        try:
            return worker, iid, worker.call("new", iid, {"kwargs": kwargs}, start_timeout_s)
        except BaseException as exc:
            worker.release(iid)
            if not (isinstance(exc, WorkerError) and worker.dead and (isinstance(exc, WorkerStopped) or worker.exited)):
                raise
            if lost is not None:
                why = lost.failure or "was stopped"
                raise WorkerError(f"{label}: this env could not be built: the confined worker chosen for it {why}, "
                                  f"and the fresh worker started in its place failed too: {exc}") from exc
            lost = worker


def _reserve(key: tuple[Any, ...], label: str, text: str, sha256: str, limits: ValidationLimits,
             start_timeout_s: float, cap: int, fresh: bool) -> tuple[Worker, int]:
    """A live worker of ``key`` with room (a new one if none has, or if ``fresh``) and a fresh instance id on it."""
    while True:
        with _lock:
            for k in [k for k, ws in _workers.items() if not ws]:
                del _workers[k]
            worker = None if fresh else next((w for w in list(_workers.get(key, ())) if _has_room(w, cap)), None)
            if worker is None:
                deadline = time.monotonic() + start_timeout_s
                worker = Worker(label, text, sha256, limits, deadline)
                try:
                    worker.hello(deadline, start_timeout_s)
                except BaseException:
                    worker.kill()
                    raise
                worker.on_kill = functools.partial(_forget, _workers.setdefault(key, []))
                _workers[key].append(worker)
            iid = worker.reserve()
        if iid is not None:  # None: it died since it was chosen (a release killed it): choose again
            return worker, iid


def _forget(workers: list[Worker], worker: Worker) -> None:
    """Drop a killed worker from its registry list (``Worker.on_kill``). Takes no lock: see ``_workers``."""
    try:
        workers.remove(worker)
    except ValueError:
        pass


def _has_room(worker: Worker, cap: int) -> bool:
    return len(worker.instances) < cap and not crowded(worker)


def crowded(worker: Worker) -> bool:
    """Whether ``worker`` should take no more instances for reasons other than its cap: it is dead (one found
    exited is stopped now), or its processes hold half its memory limit or one of them has used half its CPU
    time. Instances already on it stay (moving one would give it a fresh ``Env`` and a fresh random stream)."""
    if worker.gone():
        return True
    pids = conf.descendants(worker.proc.pid)
    return conf.anon_memory_bytes(pids) >= worker.memory_limit / 2 or _cpu_s(pids) >= WORKER_CPU_S / 2


def _cpu_s(pids: set[int]) -> float:
    """The most CPU time one of ``pids`` has used (``RLIMIT_CPU`` is per process), in seconds."""
    most = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            most = max(most, int(fields[11]) + int(fields[12]))  # utime + stime, in clock ticks
        except (OSError, IndexError, ValueError):
            continue
    return most / os.sysconf("SC_CLK_TCK")


def live_workers() -> list[Worker]:
    """The live workers of this process (for tests and benchmarks)."""
    pid = os.getpid()
    with _lock:
        return [w for key, ws in list(_workers.items()) if key[0] == pid for w in list(ws) if not w.dead]


def _kill_all() -> None:
    pid = os.getpid()
    with _lock:
        for key in [k for k in _workers if k[0] == pid]:
            for worker in list(_workers.pop(key)):
                worker.kill()


def _after_fork() -> None:
    global _lock
    _lock = threading.RLock()  # another thread may have held it at the fork; the parent's workers stay its own


atexit.register(_kill_all)
os.register_at_fork(after_in_child=_after_fork)
