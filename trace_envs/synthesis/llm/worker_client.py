"""The host's connection to one confined LLM env worker process (``worker.py``): its launch, pipes and calls.

A :class:`Worker` loads one module (its text, pinned by sha256) in a subprocess confined by ``sandbox.confine``
and hosts any number of that module's ``Env`` instances, each named by an id this host assigns
(:meth:`Worker.reserve`); every request names its instance, and the worker keeps one separate ``Env`` object per
id. Calls are made one at a time (a lock), each bounded by its own wall clock, and every reply is checked
(``worker_protocol``). A hang, a crash, a malformed or oversize reply, a memory or process-count breach or an
interrupted exchange kills the worker: the call that saw it raises ``TimeoutError`` or ``WorkerError``, and
every other instance it hosted gets :meth:`Worker.stopped` (naming the module and what happened) on its next call.
The worker is killed, and its temporary directory removed, when its last instance is released; a killed worker
frees its read buffer at once and tells its pool (``on_kill``), which forgets it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

from trace_envs.swe import confinement as conf
from trace_envs.swe.sandbox import spawn
from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.sandbox import Confinement, confine
from trace_envs.synthesis.llm.worker import MAX_LINE_BYTES
from trace_envs.synthesis.llm.worker_protocol import EnvError, Malformed, WorkerError, parse_reply

WORKER_MODULE = "trace_envs.synthesis.llm.worker"
WORKER_CPU_S = 3600  # RLIMIT_CPU of one worker over its life (calls are bounded by the wall clock already)
WATCH_S = 0.25  # while a call runs longer than this, the watchdog checks memory and process count this often
KILL_WAIT_S = 2.0
ERROR_LOG_CHARS = 2000


class WorkerStopped(WorkerError):
    """A call on a worker that was stopped already (for another instance's fault): the request was never sent."""


class Worker:
    """One confined worker process, its pipes and the env instances it hosts (host side).

    ``kill()`` ends it and removes its directory; ``failure`` says why it was stopped (None: not for a fault) and
    ``exited`` whether it ended by itself (it exited, or was killed from outside, before or while taking a request).
    """

    def __init__(self, label: str, text: str, sha256: str, limits: ValidationLimits, deadline: float):
        self.label = label
        self.owner = os.getpid()  # a forked copy of the host never uses nor kills its parent's worker
        self.proc: subprocess.Popen | None = None
        self.group: conf.SandboxProcesses | None = None
        self.timeout_s = max(0.0, deadline - time.monotonic())  # of the call now running (for its messages)
        self.buf = bytearray()
        self.scanned = 0
        self.dead = False
        self.failure: str | None = None
        self.failed_in = "in another instance's call"  # where the fault was seen (for the other instances' errors)
        self.exited = False
        self.on_kill: Callable[[Worker], None] | None = None  # called once when it is killed (by its pool)
        self.capability = ""
        self.instances: set[int] = set()  # the ids of the env instances it hosts
        self.dropped: list[int] = []  # released ids the worker has not been told of (sent with the next request)
        self._next_id = 1
        self._calls = threading.Lock()  # one exchange at a time on the pipes
        self._slots = threading.RLock()  # reserve / release (re-entrant: a release may run from the collector)
        self.box: Confinement = confine(limits, "LLM env worker", prefix="trace-llm-worker-")
        try:
            self.memory_limit = limits.memory_mb * 2**20
            self.max_processes = limits.max_processes
            name = Path(label).name if Path(label).name.endswith(".py") else "module.py"
            cfg = {"module_path": self.box.write_home(name, text), "sha256": sha256}
            cfg_path = self.box.write_home("worker.json", json.dumps(cfg))
            self.errlog = self.box.tmp / "worker.stderr"
            self._launch(cfg_path, deadline)
        except BaseException:
            self.kill()
            raise

    # -- instances ------------------------------------------------------------------------------
    def reserve(self) -> int | None:
        """A fresh instance id, counted as hosted here (None when the worker is dead)."""
        with self._slots:
            if self.dead:
                return None
            iid, self._next_id = self._next_id, self._next_id + 1
            self.instances.add(iid)
            return iid

    def release(self, iid: int) -> None:
        """Instance ``iid`` is gone (closed or collected): the worker drops its ``Env`` with the next request (no
        message now). When no instance is left the worker itself is killed here (:meth:`kill`: signals, waits
        bounded by :data:`KILL_WAIT_S`, the removal of its directory), possibly from the garbage collector."""
        if os.getpid() != self.owner:
            return
        with self._slots:
            if iid not in self.instances:
                return
            self.instances.discard(iid)
            if not self.instances:
                self.kill()
            else:
                self.dropped.append(iid)

    def stopped(self, op: str = "") -> WorkerStopped:
        """The error of an instance whose worker was stopped while it was not calling (``op``: the call refused)."""
        why = self.failure or "was stopped"
        then = ("this env was not built on it" if op == "new"
                else "this call was not made (the next reset starts this env on a fresh worker)")
        return WorkerStopped(f"{self.label}: the confined worker this env shared with other instances of its "
                             f"module {why} ({self.failed_in}); it was stopped and {then}")

    def gone(self) -> bool:
        """Whether the worker is dead. One whose launcher has exited is dead too: unless a call is running (that
        call finds it), it is stopped now (``failure``: it exited; killed, reaped, its directory removed)."""
        proc = self.proc
        if self.dead or proc is None or os.getpid() != self.owner:
            return self.dead or proc is None
        if proc.poll() is None:
            return False
        if self._calls.acquire(blocking=False):
            try:
                if not self.dead:
                    self.failure, self.failed_in, self.exited = (f"exited (exit status {proc.returncode})",
                                                                 "found between calls", True)
                    self.kill()
            finally:
                self._calls.release()
        return True

    # -- process --------------------------------------------------------------------------------
    def _python_argv(self, cfg_path: str) -> list[str]:
        # not -I: that would ignore PYTHONHASHSEED; the environment is the sandbox's own (no PYTHONPATH etc.), -s
        # leaves out the user site and -P the working directory
        return ["-s", "-P", "-m", WORKER_MODULE, cfg_path]

    def _launch(self, cfg_path: str, deadline: float) -> None:
        r, w = os.pipe()
        try:
            with open(self.errlog, "wb") as err:
                self.proc = spawn(self.box.argv(self._python_argv(cfg_path), w), self.box.dirs["work"],
                                  {**self.box.env, "PYTHONHASHSEED": "0"}, self.box.limits, WORKER_CPU_S,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, pass_fds=(w,))
            os.close(w)
            w = -1
            self.group = conf.SandboxProcesses(self.proc.pid, self.box.token, self.box.scan)
            self.fd_in = self.proc.stdin.fileno()
            self.fd_out = self.proc.stdout.fileno()
            os.set_blocking(self.fd_in, False)
            os.set_blocking(self.fd_out, False)
            status = self._read_status(r, deadline)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        if not status:
            raise self._fail("could not be started: the sandbox launcher failed", exited=True)

    def _read_status(self, fd: int, deadline: float) -> bytes:
        """The launcher's status (what it applied), read until every copy of the pipe is closed."""
        chunks = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._fail(f"was not started by the sandbox launcher within {self.timeout_s:g} s",
                                 timeout=True)
            if _ready(fd, select.POLLIN, min(remaining, WATCH_S)):
                chunk = os.read(fd, 65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

    def kill(self) -> None:
        """Kill the worker (its processes, then the launcher), reap it, close its pipes, remove its directory."""
        if self.dead or os.getpid() != self.owner:
            return
        self.dead = True
        self.buf, self.scanned = bytearray(), 0  # it may hold up to 16 MB of a reply nobody reads now
        try:
            self._end()
        finally:
            if self.on_kill is not None:
                self.on_kill(self)

    def _end(self) -> None:
        proc = self.proc
        if proc is not None:
            if proc.poll() is None:
                # the worker and what it started first: the launcher's PID 1 reaps them and exits, then the launcher
                # (no orphan, no zombie); the launcher is not reaped yet, so its pid is still this worker's
                for pid in conf.descendants(proc.pid) - {proc.pid} - _children(proc.pid):
                    _sigkill(pid)
                try:
                    proc.wait(timeout=KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None and self.group is not None:
                self.group.kill()  # whatever is left: the process group, and (no PID namespace) the token's processes
            elif self.box.scan:  # reaped: its pid is not ours any more; only the token still finds strays
                for pid in conf.token_pids(f"{conf.TOKEN_VAR}={self.box.token}".encode()):
                    _sigkill(pid)
            try:
                proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:  # unkillable for now (a stuck kernel call): Popen reaps it later
                pass
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        self.box.cleanup()

    def pids(self) -> set[int]:
        """The live processes of this worker (the launcher included)."""
        return set() if self.dead or self.group is None else self.group.pids()

    # -- protocol -------------------------------------------------------------------------------
    def hello(self, deadline: float, timeout_s: float) -> str:
        """Wait for the worker's hello (the module loaded); returns its capability."""
        self.timeout_s = timeout_s
        with self._calls:
            self.capability = self._exchange(b"", "hello", deadline)["capability"]
        return self.capability

    def call(self, op: str, iid: int, payload: dict[str, Any], timeout_s: float) -> Any:
        """Request ``op`` of instance ``iid`` (with ``payload``); its checked result. :meth:`stopped` when the
        worker is dead already."""
        with self._calls:
            if self.dead:
                raise self.stopped(op)
            closed, self.dropped = self.dropped, []
            doc = {"op": op, "id": iid, **payload, **({"closed": closed} if closed else {})}
            try:
                data = json.dumps(doc, ensure_ascii=True, allow_nan=False).encode("ascii") + b"\n"
            except (TypeError, ValueError) as exc:
                self.dropped[:0] = closed
                raise TypeError(f"{self.label}: the {op} request is not finite JSON ({exc}); a confined env takes "
                                "JSON values only") from None
            if len(data) > MAX_LINE_BYTES:
                self.dropped[:0] = closed
                raise ValueError(f"{self.label}: the {op} request is {len(data):,} bytes, over the "
                                 f"{MAX_LINE_BYTES:,}-byte limit of one message")
            self.timeout_s = timeout_s
            return self._exchange(data, op, time.monotonic() + timeout_s)

    def _exchange(self, data: bytes, op: str, deadline: float) -> Any:
        """Send ``data`` (if any) and read the reply; an error the env raised in the worker is raised here once the
        exchange is complete. Anything that interrupts the exchange (a timeout, a malformed reply, or the caller's
        own exception, such as ``KeyboardInterrupt``) leaves the pipes out of step: the worker is killed."""
        try:
            if data:
                self._unasked(op)
                self._send(data, op, deadline)
            reply = self._reply(op, deadline)
        except BaseException as exc:
            if self.failure is None:
                self.failure = f"was interrupted during {op} ({type(exc).__name__})"
            self.kill()
            raise
        if isinstance(reply, EnvError):
            raise reply.exc
        return reply

    def _unasked(self, op: str) -> None:
        """Between two exchanges the worker has nothing to say: anything it sent since is a protocol violation."""
        if not self.buf and _ready(self.fd_out, select.POLLIN, 0.0):
            try:
                chunk = os.read(self.fd_out, 1 << 16)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                raise self._fail(f"exited before the {op} request", exited=True)
            self.buf += chunk or b""
        if self.buf:
            raise self._fail(f"sent {len(self.buf):,} bytes nobody asked for before the {op} request")

    def _send(self, data: bytes, op: str, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._fail(f"took no {op} request within {self.timeout_s:g} s", timeout=True)
            if not _ready(self.fd_in, select.POLLOUT, min(remaining, WATCH_S)):
                self._watch(op)
                continue
            try:
                n = os.write(self.fd_in, view)
            except BlockingIOError:
                continue
            except OSError as exc:  # BrokenPipeError: it is gone
                raise self._fail(f"exited before the {op} request ({exc})", exited=True) from None
            view = view[n:]

    def _read_line(self, op: str, deadline: float) -> bytes:
        while True:
            i = self.buf.find(b"\n", self.scanned)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buf)
            if len(self.buf) > MAX_LINE_BYTES:
                raise self._fail(f"sent a reply to {op} over the {MAX_LINE_BYTES:,}-byte limit of one message")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._fail(f"did not answer {op} within {self.timeout_s:g} s", timeout=True)
            if not _ready(self.fd_out, select.POLLIN, min(remaining, WATCH_S)):
                self._watch(op)
                continue
            try:
                chunk = os.read(self.fd_out, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise self._fail(f"exited during {op}", exited=True)
            self.buf += chunk

    def _reply(self, op: str, deadline: float) -> Any:
        line = self._read_line(op, deadline)
        try:
            return parse_reply(line, op, self.label)
        except Malformed as exc:
            raise self._fail(f"sent a malformed reply to {op} ({str(exc)[:300]})") from None

    def _watch(self, op: str) -> None:
        """Kill the worker when its processes hold more memory or are more than its limits allow."""
        pids = self.group.pids()
        if len(pids) > self.max_processes + 2:  # + the launcher and PID 1
            raise self._fail(f"ran {len(pids)} processes during {op}, over its limit of {self.max_processes}")
        used = conf.anon_memory_bytes(pids)
        if used > self.memory_limit:
            raise self._fail(f"held {used // 2**20} MB during {op}, over its limit of "
                             f"{self.memory_limit // 2**20} MB")

    def _fail(self, why: str, timeout: bool = False, exited: bool = False) -> Exception:
        """Kill the worker; the error to raise (``TimeoutError`` or :class:`WorkerError`), with its exit status and
        the tail of its error log. ``exited``: it is ending by itself (its exit status is worth a short wait)."""
        proc = self.proc
        status = None
        if proc is not None:
            try:
                status = proc.wait(timeout=0.5) if exited else proc.poll()
            except subprocess.TimeoutExpired:
                pass
        log = ""
        try:
            log = self.errlog.read_bytes()[-ERROR_LOG_CHARS:].decode("utf-8", "replace").strip()
        except OSError:
            pass
        said = f" (exit status {status})" if status is not None else ""
        self.failure = f"{why}{said}"
        self.exited = self.exited or exited
        self.kill()
        msg = (f"{self.label}: the confined worker of this LLM-written env {why}{said}; it was stopped (the next "
               "reset starts a fresh one)")
        if log:
            msg += f". Its error output ends: {log}"
        return TimeoutError(msg) if timeout else WorkerError(msg)


def _ready(fd: int, event: int, timeout_s: float) -> bool:
    """Whether ``fd`` is ready for ``event`` (or hung up / in error) within ``timeout_s``."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0.0, timeout_s) * 1000))


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                found.update(int(c) for c in fh.read().split())
    except OSError:
        pass
    return found


def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
