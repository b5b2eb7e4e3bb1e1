"""Independent jobs at once in forked worker processes, each on one torch thread (``pipeline.workers``).

The embedded default's model is too small for a decode step to split well over two threads: on two cores, two
one-thread processes get through 1.30x (GRPO) to 1.57x (greedy evaluation) the episodes of one two-thread process
(``benchmarks/pipeline_workers.py``). ``run_jobs`` runs a graph of jobs: a job starts once every job it names in
``after`` finished, the costliest ready job first. With ``workers=1`` each job runs here, in the order given (which
must list a job after the jobs it waits for), as plain sequential code would; so do the jobs a worker's own job
starts (no worker forks more workers).

A worker is a ``fork`` of this process, so a job's function (a closure) and whatever this process registered (the
run's synthesized envs) come along; only its result travels back, pickled. A job reads the results of the jobs it
waited for from the mapping it is called with. A job that fails fails the whole call once the jobs still running
have been stopped; what it finished stays finished (a pipeline stage records itself), so the same call resumes.
"""

from __future__ import annotations

import logging
import multiprocessing
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Mapping, Sequence

logger = logging.getLogger(__name__)

_in_worker = False  # set in a worker: the jobs it starts itself run in it, one after another


@dataclass
class Job:
    """One unit of work: ``fn(results)`` gets the results of the finished jobs (by key) and returns its own."""

    key: str
    fn: Callable[[Mapping[str, Any]], Any]
    after: tuple[str, ...] = ()
    cost: float = 1.0  # a relative size: among ready jobs the costliest starts first


class JobFailed(RuntimeError):
    """A job raised in its worker; the message carries the worker's traceback."""


@dataclass
class _Running:
    job: Job
    process: Any
    conn: Connection


def run_jobs(jobs: Sequence[Job], workers: int = 1) -> dict[str, Any]:
    """Run every job (see the module docstring); returns ``{key: result}``."""
    _check(jobs)
    if workers <= 1 or _in_worker:
        results: dict[str, Any] = {}
        for job in jobs:
            results[job.key] = job.fn(results)
        return results
    return _run_forked(list(jobs), workers)


def _check(jobs: Sequence[Job]) -> None:
    keys = [job.key for job in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"job keys repeat: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
    seen: set[str] = set()
    for job in jobs:
        missing = [a for a in job.after if a not in seen]
        if missing:
            raise ValueError(f"job {job.key!r} waits for {missing}, which are not listed before it")
        seen.add(job.key)


def _worker(job: Job, results: Mapping[str, Any], conn: Connection) -> None:
    from trace_train.threads import cap_torch_threads

    global _in_worker
    _in_worker = True
    cap_torch_threads(1)
    try:
        message: tuple[str, Any] = ("ok", job.fn(results))
    except BaseException:  # noqa: BLE001 - everything goes back to the parent, KeyboardInterrupt included
        message = ("error", traceback.format_exc())
    try:
        conn.send(message)
    except Exception:  # noqa: BLE001 - an unpicklable result
        conn.send(("error", f"job {job.key!r}: its result cannot be sent back:\n{traceback.format_exc()}"))
    conn.close()


def _run_forked(jobs: list[Job], workers: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("fork")
    pending, running, results = list(jobs), {}, {}
    try:
        while pending or running:
            ready = sorted((j for j in pending if all(a in results for a in j.after)), key=lambda j: -j.cost)
            for job in ready[:workers - len(running)]:
                pending.remove(job)
                receive, send = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_worker, args=(job, dict(results), send), name=f"job:{job.key}",
                                      daemon=False)
                process.start()
                send.close()
                running[receive] = _Running(job, process, receive)
                logger.info("job %s started in worker %d (%d running, %d waiting)", job.key, process.pid,
                            len(running), len(pending))
            if not running:
                raise RuntimeError(f"jobs {[j.key for j in pending]} wait for jobs that never finish")
            for conn in wait(list(running)):
                done = running.pop(conn)
                try:
                    status, payload = conn.recv()
                except EOFError:
                    done.process.join()
                    raise JobFailed(f"job {done.job.key!r}: its worker exited with code {done.process.exitcode} "
                                    "before returning a result") from None
                except Exception as exc:  # the result came but cannot be rebuilt here (e.g. a class only it has)
                    done.process.join()
                    raise JobFailed(f"job {done.job.key!r}: its result could not be received: "
                                    f"{type(exc).__name__}: {exc}") from exc
                finally:
                    conn.close()
                done.process.join()
                if status != "ok":
                    raise JobFailed(f"job {done.job.key!r} failed in its worker:\n{payload}")
                results[done.job.key] = payload
                logger.info("job %s finished", done.job.key)
    finally:
        _stop(running.values())
    return results


def _stop(running: Any) -> None:
    """Stop the workers still running (a job failed or this process was interrupted); they record nothing more."""
    for r in running:
        if r.process.is_alive():
            r.process.terminate()
    for r in running:
        r.process.join()
        r.conn.close()
        if r.process.exitcode not in (0, None):
            logger.warning("job %s stopped (worker %s, exit code %s)", r.job.key, r.process.pid, r.process.exitcode)

