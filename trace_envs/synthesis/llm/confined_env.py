"""``ConfinedEnv``: the host-side proxy of an LLM-written env whose module runs only in a confined worker.

``loader.make_env`` (the Gymnasium entry point) returns one by default. The host reads the module's text and
checks its sha256 and the static check (a refused module fails here, as before), then starts a persistent
worker subprocess (``worker.py``) with the dynamic check's confinement (``sandbox.confine``: user, mount, PID
and network namespaces and a filesystem jail where the kernel allows them, each missing one logged once as a
warning; 1 GB per process and in total, file-size and process-count limits). The worker imports the module
(the same checks again) and hosts the real ``Env``; the proxy forwards ``reset``, ``step``, ``oracle_turns()``,
``transcript`` and ``render()`` to it as JSON lines over pipes (never pickle; see ``worker.py`` for the
protocol) and checks every reply: a line over 16 MB, text that is not JSON, a reply of the wrong shape, an
observation outside ``MessageList`` or a reward that is not a finite number is an error. Its spaces are the
host's own ``MessageText`` / ``MessageList``.

Errors: an exception of the env in the worker is raised here as the same built-in exception class
(``TimeoutError`` for an authored method past ``authoring.METHOD_TIME_LIMIT_S``, ``ValueError``, ``KeyError``,
...; any other class as ``RuntimeError``), with the module's path, and the worker goes on. A worker that does
not answer within :data:`CALL_TIME_LIMIT_S` (:data:`START_TIME_LIMIT_S` to start) is killed and the call
raises ``TimeoutError``; one that exits, crashes, outgrows its memory or process limit or sends a malformed
reply is killed and the call raises :class:`WorkerError` (a ``RuntimeError``). Both are the ordinary env errors
that end only that episode wherever episodes are played (``env_error``); the next ``reset`` starts a fresh
worker (a fresh ``Env``: a ``reset(seed=None)`` then draws from fresh entropy). ``close()``, garbage collection
and interpreter exit kill the worker and remove its temporary directory.

The worker's interpreter runs with ``PYTHONHASHSEED=0``, so every worker of a module iterates its sets alike.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import time
import weakref
from pathlib import Path
from typing import Any

import gymnasium as gym

from trace_envs.core.spaces import MessageList, MessageText
from trace_envs.swe import confinement as conf
from trace_envs.swe.sandbox import spawn
from trace_envs.synthesis.llm import authoring
from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.sandbox import Confinement, confine
from trace_envs.synthesis.llm.validated import IMPORT_TIME_LIMIT_S, read_validated
from trace_envs.synthesis.llm.worker import MAX_LINE_BYTES

WORKER_MODULE = "trace_envs.synthesis.llm.worker"
# wall clock of one call: an authored method's own limit (the worker raises TimeoutError at it and goes on) plus
# room for the env's machinery; past it the worker is killed (a hang its own limit cannot stop)
CALL_TIME_LIMIT_S = authoring.METHOD_TIME_LIMIT_S + 10.0
START_TIME_LIMIT_S = IMPORT_TIME_LIMIT_S + 30.0  # the interpreter, the jail and the imports, then the module's
WORKER_CPU_S = 3600  # RLIMIT_CPU of one worker over its life (calls are bounded by the wall clock already)
WATCH_S = 0.25  # while a call runs longer than this, the watchdog checks memory and process count this often
KILL_WAIT_S = 2.0
ERROR_LOG_CHARS = 2000
_RAISED_AS = {cls.__name__: cls for cls in (
    ValueError, TypeError, KeyError, IndexError, LookupError, RuntimeError, TimeoutError, ZeroDivisionError,
    ArithmeticError, OverflowError, AttributeError, NotImplementedError, AssertionError, RecursionError, MemoryError,
    UnicodeError, StopIteration)}
_RAISED_AS["StopIteration"] = RuntimeError  # never leak StopIteration into a caller's loop


class WorkerError(RuntimeError):
    """The confined worker exited, crashed, broke a limit or sent a malformed reply (it was killed)."""


class _Malformed(Exception):
    pass


class _EnvError:
    """An exception the env raised in the worker (the worker goes on), as a reply."""

    def __init__(self, exc: Exception):
        self.exc = exc


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_line(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise _Malformed(f"not JSON: {exc}") from None


_MESSAGES = MessageList()


def _messages(value: Any, what: str) -> list[dict[str, Any]]:
    if not _MESSAGES.contains(value):
        raise _Malformed(f"{what} is not a list of chat messages")
    return value


def _info(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not a JSON object")
    return value


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Malformed(f"{what} is not a positive integer")
    return value


def _check_result(op: str, result: Any) -> Any:
    """``result`` of request ``op`` when it has the shape the protocol says; :class:`_Malformed` otherwise."""
    if op == "hello":
        _info(result, "the hello")
        render_mode = result.get("render_mode")
        if (render_mode is not None and not isinstance(render_mode, str)) or not isinstance(result.get("capability"),
                                                                                             str):
            raise _Malformed("the hello's render_mode or capability is not a string")
        return {"max_steps": _whole(result.get("max_steps"), "max_steps"),
                "max_errors": _whole(result.get("max_errors"), "max_errors"), "render_mode": render_mode,
                "capability": result["capability"]}
    if op == "reset":
        _info(result, "the reset reply")
        return _messages(result.get("obs"), "the observation"), _info(result.get("info"), "the info")
    if op == "step":
        _info(result, "the step reply")
        reward = result.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise _Malformed(f"the reward {reward!r} is not a finite number")
        if not isinstance(result.get("terminated"), bool) or not isinstance(result.get("truncated"), bool):
            raise _Malformed("terminated / truncated are not booleans")
        return (_messages(result.get("obs"), "the observation"), float(reward), result["terminated"],
                result["truncated"], _info(result.get("info"), "the info"))
    if op == "oracle_turns":
        if not isinstance(result, list) or not all(isinstance(t, str) for t in result):
            raise _Malformed("the oracle's turns are not a list of strings")
        return result
    if op == "transcript":
        if not isinstance(result, list) or not all(isinstance(m, dict) for m in result):
            raise _Malformed("the transcript is not a list of messages")
        return result
    if op == "render":
        if result is not None and not isinstance(result, str):
            raise _Malformed("the rendering is not a string")
        return result
    raise _Malformed(f"a reply to an unknown request {op!r}")  # pragma: no cover - the proxy's own ops only


class _Worker:
    """One confined worker process and its pipes (host side). ``kill()`` ends it and removes its directory."""

    def __init__(self, label: str, text: str, sha256: str, kwargs: dict[str, Any], limits: ValidationLimits,
                 deadline: float):
        self.label = label
        self.owner = os.getpid()  # a forked copy of the host never kills its parent's worker
        self.proc: subprocess.Popen | None = None
        self.group: conf.SandboxProcesses | None = None
        self.timeout_s = max(0.0, deadline - time.monotonic())  # of the call now running (for its messages)
        self.buf = bytearray()
        self.scanned = 0
        self.dead = False
        self.box: Confinement = confine(limits, "LLM env worker", prefix="trace-llm-worker-")
        try:
            self.memory_limit = limits.memory_mb * 2**20
            self.max_processes = limits.max_processes
            name = Path(label).name if Path(label).name.endswith(".py") else "module.py"
            cfg = {"module_path": self.box.write_home(name, text), "sha256": sha256, "kwargs": kwargs}
            cfg_path = self.box.write_home("worker.json", json.dumps(cfg))
            self.errlog = self.box.tmp / "worker.stderr"
            self._launch(cfg_path, deadline)
        except BaseException:
            self.kill()
            raise

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
            proc.wait()
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
    def hello(self, deadline: float, timeout_s: float) -> dict[str, Any]:
        self.timeout_s = timeout_s
        return self._exchange(b"", "hello", deadline)

    def call(self, op: str, payload: dict[str, Any], timeout_s: float) -> Any:
        try:
            data = json.dumps({"op": op, **payload}, ensure_ascii=True, allow_nan=False).encode("ascii") + b"\n"
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{self.label}: the {op} request is not finite JSON ({exc}); a confined env takes JSON "
                            "values only") from None
        if len(data) > MAX_LINE_BYTES:
            raise ValueError(f"{self.label}: the {op} request is {len(data):,} bytes, over the {MAX_LINE_BYTES:,}-byte "
                             "limit of one message")
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
        except BaseException:
            self.kill()
            raise
        if isinstance(reply, _EnvError):
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
            doc = _json_line(line)
            if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
                raise _Malformed("not a reply object")
            if doc["ok"]:
                if "result" not in doc:
                    raise _Malformed("a reply without a result")
                return _check_result(op, doc["result"])
            err = doc.get("error")
            if not isinstance(err, dict) or not isinstance(err.get("type"), str) \
                    or not isinstance(err.get("message"), str):
                raise _Malformed("an error reply without a type and a message")
        except _Malformed as exc:
            raise self._fail(f"sent a malformed reply to {op} ({str(exc)[:300]})") from None
        cls = _RAISED_AS.get(err["type"], RuntimeError)
        prefix = "" if cls.__name__ == err["type"] else f"{err['type'][:100]}: "
        return _EnvError(cls(f"{prefix}{err['message'][:4000]} [{self.label}, in its confined worker]"))

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
        self.kill()
        said = f" (exit status {status})" if status is not None else ""
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


class ConfinedEnv(gym.Env):
    """A Gymnasium env whose LLM-written module runs in a confined worker subprocess (see the module docstring).

    ``source``/``sha256``: the validated module and its pinned hash; ``env_kwargs``: the module ``Env``'s keyword
    arguments (JSON values). ``call_timeout_s`` / ``start_timeout_s``: the wall clock of one call / of starting a
    worker; ``limits``: the worker's memory, file-size and process limits (``ValidationLimits``' defaults).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, source: str | os.PathLike, sha256: str, env_kwargs: dict[str, Any] | None = None, *,
                 call_timeout_s: float = CALL_TIME_LIMIT_S, start_timeout_s: float = START_TIME_LIMIT_S,
                 limits: ValidationLimits | None = None):
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
        self.call_timeout_s = float(call_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.limits = limits or ValidationLimits()
        self.action_space = MessageText()
        self.observation_space = MessageList()
        self._worker: _Worker | None = None
        self._finalizer: weakref.finalize | None = None
        hello = self._start()  # a module that cannot be loaded or built fails at make time, as in-process
        self.max_steps: int = hello["max_steps"]
        self.max_errors: int = hello["max_errors"]
        self.render_mode: str | None = hello["render_mode"]
        self.capability: str = hello["capability"]

    # -- worker ---------------------------------------------------------------------------------
    def _start(self) -> dict[str, Any]:
        self._stop()
        deadline = time.monotonic() + self.start_timeout_s
        worker = _Worker(self.source, self._text, self._sha256, self._kwargs, self.limits, deadline)
        self._finalizer = weakref.finalize(self, worker.kill)  # close(), garbage collection, interpreter exit
        try:
            hello = worker.hello(deadline, self.start_timeout_s)
        except BaseException:
            self._stop()
            raise
        self._worker = worker
        return hello

    def _stop(self) -> None:
        self._worker = None
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def _call(self, op: str, **payload: Any) -> Any:
        worker = self._worker
        if worker is None:
            raise RuntimeError(f"{self.source}: the confined worker of this env ended (see the previous error); "
                               "call reset() to start a fresh one")
        try:
            return worker.call(op, payload, self.call_timeout_s)
        except BaseException:
            if worker.dead:
                self._stop()
            raise

    @property
    def worker_pids(self) -> set[int]:
        """The live processes of the current worker (its launcher included); empty when none runs."""
        return set() if self._worker is None else self._worker.pids()

    # -- gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self._worker is None:
            self._start()
        return self._call("reset", seed=seed, options=options)

    def step(self, action: Any):
        return self._call("step", action=action)

    def render(self) -> str | None:
        return self._call("render")

    def close(self) -> None:
        self._stop()
        super().close()

    # -- what callers read off an LLM-written env ----------------------------------------------
    def oracle_turns(self) -> list[str]:
        """The oracle's turns for the current task, ending with a stop turn (``CapabilityEnv.oracle_turns``)."""
        return self._call("oracle_turns")

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Every message so far, system prompt first (``ToolUseEnv.transcript``)."""
        return self._call("transcript")
