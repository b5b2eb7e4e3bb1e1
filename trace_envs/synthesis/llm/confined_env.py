"""``ConfinedEnv``: the host-side proxy of an LLM-written env whose module runs only in a confined worker.

``loader.make_env`` (the Gymnasium entry point) returns one by default. The host reads the module's text and
checks its sha256 and the static check (a refused module fails here, as before), then puts the env on a
persistent worker subprocess (``worker.py``, driven by ``worker_client.Worker``) with the dynamic check's
confinement (``sandbox.confine``: user, mount, PID and network namespaces and a filesystem jail where the kernel
allows them, each missing one logged once as a warning; 1 GB per process and in total, file-size and
process-count limits). The worker imports the module (the same checks again) and hosts the real ``Env``; the proxy
forwards ``reset``, ``step``, ``oracle_turns()``, ``transcript`` and ``render()`` to it as JSON lines over pipes
(never pickle; see ``worker.py`` for the protocol) and checks every reply (``worker_protocol``): a line over
16 MB, text that is not JSON, a reply of the wrong shape, an observation outside ``MessageList`` or a reward that
is not a finite number is an error. Its spaces are the host's own ``MessageText`` / ``MessageList``.

Shared workers (``worker_pool``): the instances of one module (same path, sha256 and limits) in one host process
share a worker, up to ``instances_per_worker`` (default :data:`INSTANCES_PER_WORKER`) each; every instance has its
own ``Env`` object there, addressed by an id the host assigned. They share the worker's limits (memory, processes,
CPU time) and its faults: a fault stops every instance it hosts. A worker near its limits (half its memory, or half
the CPU time of a process) takes no new instance; the instances on it stay (a move would give an instance a fresh
``Env`` and, after ``reset(seed=None)``, a fresh random stream), so long-lived instances can still meet a limit
together, and then each resets onto a fresh worker. A worker that died unseen before an
instance was built on it (at make time or at a ``reset``) is not that instance's error: it is built on a fresh
worker instead.

Errors: an exception of the env in the worker is raised here as the same built-in exception class
(``TimeoutError`` for an authored method past ``authoring.METHOD_TIME_LIMIT_S``, ``ValueError``, ``KeyError``,
...; any other class as ``RuntimeError``), with the module's path, and the worker goes on. A worker that does
not answer within :data:`CALL_TIME_LIMIT_S` (:data:`START_TIME_LIMIT_S` to start) is killed and the call
raises ``TimeoutError``; one that exits, crashes, outgrows its memory or process limit or sends a malformed
reply is killed and the call raises :class:`WorkerError` (a ``RuntimeError``); every other instance it hosted
raises :class:`WorkerError` (naming the module and what happened) on its next call other than ``reset``. All are
the ordinary env errors that end only that episode wherever episodes are played (``env_error``); the next
``reset`` puts the instance on a live worker (a fresh ``Env``: a ``reset(seed=None)`` then draws from fresh
entropy). ``close()``, garbage collection and interpreter exit release the instance; a worker is killed, and its
temporary directory removed, when its last instance is released. A copy of the env in a forked process never
uses its parent's worker: its next ``reset`` starts its own.

The worker's interpreter runs with ``PYTHONHASHSEED=0``, so every worker of a module iterates its sets alike.
"""

from __future__ import annotations

import json
import math
import os
import weakref
from typing import Any

import gymnasium as gym

from trace_envs.core.spaces import MessageList, MessageText
from trace_envs.synthesis.llm import authoring
from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.validated import IMPORT_TIME_LIMIT_S, read_validated
from trace_envs.synthesis.llm.worker_client import Worker
from trace_envs.synthesis.llm.worker_pool import INSTANCES_PER_WORKER, attach
from trace_envs.synthesis.llm.worker_protocol import WorkerError

__all__ = ["CALL_TIME_LIMIT_S", "INSTANCES_PER_WORKER", "START_TIME_LIMIT_S", "ConfinedEnv", "WorkerError"]

# wall clock of one call: an authored method's own limit (the worker raises TimeoutError at it and goes on) plus
# room for the env's machinery; past it the worker is killed (a hang its own limit cannot stop)
CALL_TIME_LIMIT_S = authoring.METHOD_TIME_LIMIT_S + 10.0
START_TIME_LIMIT_S = IMPORT_TIME_LIMIT_S + 30.0  # the interpreter, the jail and the imports, then the module's


class ConfinedEnv(gym.Env):
    """A Gymnasium env whose LLM-written module runs in a confined worker subprocess (see the module docstring).

    ``source``/``sha256``: the validated module and its pinned hash; ``env_kwargs``: the module ``Env``'s keyword
    arguments (JSON values). ``call_timeout_s`` / ``start_timeout_s``: the wall clock of one call / of starting a
    worker and building the env; ``limits``: the worker's memory, file-size and process limits
    (``ValidationLimits``' defaults); ``instances_per_worker``: how many instances of the module one worker hosts
    at most (1: a worker of its own).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, source: str | os.PathLike, sha256: str, env_kwargs: dict[str, Any] | None = None, *,
                 call_timeout_s: float = CALL_TIME_LIMIT_S, start_timeout_s: float = START_TIME_LIMIT_S,
                 limits: ValidationLimits | None = None, instances_per_worker: int = INSTANCES_PER_WORKER):
        self.source = str(source)
        self._text = read_validated(self.source, sha256)  # refused modules fail here, before any process starts
        self._sha256 = sha256
        self._kwargs = dict(env_kwargs or {})
        try:
            json.dumps(self._kwargs, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{self.source}: the env's keyword arguments must be JSON values ({exc})") from None
        for name, value in (("call_timeout_s", call_timeout_s), ("start_timeout_s", start_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(instances_per_worker, bool) or not isinstance(instances_per_worker, int) \
                or instances_per_worker < 1:
            raise ValueError(f"instances_per_worker must be a positive integer, got {instances_per_worker!r}")
        self.call_timeout_s = float(call_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.limits = limits or ValidationLimits()
        self.instances_per_worker = instances_per_worker
        self.action_space = MessageText()
        self.observation_space = MessageList()
        self._worker: Worker | None = None
        self._id: int | None = None
        self._finalizer: weakref.finalize | None = None
        built = self._attach()  # a module that cannot be loaded or built fails at make time, as in-process
        self.max_steps: int = built["max_steps"]
        self.max_errors: int = built["max_errors"]
        self.render_mode: str | None = built["render_mode"]
        self.capability: str = self._worker.capability

    # -- worker ---------------------------------------------------------------------------------
    def _attach(self) -> dict[str, Any]:
        """Put a fresh ``Env`` of the module on a live worker (a shared one with room, or a new one)."""
        self._detach()
        worker, iid, built = attach(self.source, self._text, self._sha256, self._kwargs, self.limits,
                                    self.instances_per_worker, self.start_timeout_s)
        # close(), garbage collection, interpreter exit: the worker forgets it (and ends with its last instance)
        self._finalizer = weakref.finalize(self, worker.release, iid)
        self._worker, self._id = worker, iid
        return built

    def _detach(self) -> None:
        self._worker = self._id = None
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def _live(self) -> bool:
        """Whether this instance is on a worker that serves it (not dead, not a forked copy's parent's)."""
        worker = self._worker
        return worker is not None and not worker.dead and worker.owner == os.getpid()

    def _call(self, op: str, **payload: Any) -> Any:
        worker, iid = self._worker, self._id
        if worker is None:
            raise RuntimeError(f"{self.source}: the confined worker of this env ended (see the previous error); "
                               "call reset() to start a fresh one")
        if worker.owner != os.getpid():
            self._detach()
            raise RuntimeError(f"{self.source}: this env was copied into another process (fork); its worker is "
                               "the parent's: call reset() to start one of this process")
        try:
            return worker.call(op, iid, payload, self.call_timeout_s)
        except BaseException:
            if worker.dead:
                self._detach()
            raise

    @property
    def worker_pids(self) -> set[int]:
        """The live processes of the current worker (its launcher included); empty when none runs."""
        return self._worker.pids() if self._live() else set()

    # -- gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if not self._live():  # its worker ended (a fault, or a fork): a fresh Env on a live worker
            self._attach()
        return self._call("reset", seed=seed, options=options)

    def step(self, action: Any):
        return self._call("step", action=action)

    def render(self) -> str | None:
        return self._call("render")

    def close(self) -> None:
        self._detach()
        super().close()

    # -- what callers read off an LLM-written env ----------------------------------------------
    def oracle_turns(self) -> list[str]:
        """The oracle's turns for the current task, ending with a stop turn (``CapabilityEnv.oracle_turns``)."""
        return self._call("oracle_turns")

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Every message so far, system prompt first (``ToolUseEnv.transcript``)."""
        return self._call("transcript")
