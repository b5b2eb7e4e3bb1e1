"""The ``docker`` backend: agent commands in the instance's container, grading by the swebench harness.

The agent's container comes from the instance image (row ``image`` or swebench's derived name) and is
driven with the ``docker`` CLI; grading calls swebench's own ``run_instance`` in a fresh container,
with a unique ``run_id`` per rollout (swebench returns a cached ``report.json`` for a repeated
``(run_id, model, instance)``) inside a private working directory (its ``logs/`` are cwd-relative).
swebench 5.x and 4.x signatures are both handled. Nothing here imports swebench at module import.

The agent's container gets the local backend's limits (``--memory``, ``--pids-limit``), and, as there, a command
leaves no process behind: the script each ``docker exec`` runs kills every process in the container but PID 1 when
the command returns (:func:`container_script`). Command output is read
through the same bounded head/tail capture as the local sandbox's, so a flooding command costs the host no
memory. The submission is screened with the base commit's ``setup.cfg``/``pyproject.toml`` read from a fresh
container of the image. swebench takes the patch as text: bytes of it that are not UTF-8 reach it as U+FFFD
(a fix next to such bytes does not apply there, as in swebench itself).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trace_envs.swe.grading import EvalResult, TestsReport, grade_log
from trace_envs.swe.patches import screen_patch
from trace_envs.swe.sandbox import (
    DiffError,
    ExecResult,
    OutputCapture,
    SandboxLimits,
    diff_command,
    drain,
    patch_text,
)
from trace_envs.swe.task import SWETask

WORKDIR = "/testbed"
MODEL_NAME = "trace-rl"
_CWD_LOCK = threading.Lock()
MAX_READ_BYTES = 50_000_000  # a file read or diff longer than this is refused, not held in host memory


@functools.lru_cache(maxsize=1)
def docker_available() -> bool:
    """True iff a Docker daemon answers ``docker info`` (the CLI alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def instance_image(task: SWETask, namespace: str = "swebench") -> str:
    """The row's ``image``, else swebench's derived name (``__`` -> ``_1776_``)."""
    if task.image:
        return task.image
    return f"{namespace}/sweb.eval.x86_64.{task.instance_id}:latest".lower().replace("__", "_1776_")


def docker_run_argv(image: str, name: str, network: bool, memory_mb: int | None = None,
                    max_processes: int | None = None) -> list[str]:
    """``docker run`` of the agent's container (idle ``tail``), with the sandbox's memory and process limits."""
    argv = ["docker", "run", "-d", "--name", name, "-w", WORKDIR]
    if memory_mb is not None:
        argv += ["--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m"]
    if max_processes is not None:
        argv += ["--pids-limit", str(max_processes)]
    if not network:
        argv += ["--network", "none"]
    return [*argv, image, "tail", "-f", "/dev/null"]


# Kills every process in the container but its PID 1 (the idle `tail` of docker_run_argv) and the caller: kill(-1)
# signals neither ("on Linux the call kill(-1,sig) does not signal the calling process", kill(2)) and reaches only
# the caller's PID namespace. The caller is the shell (the builtin `kill`; an external one would die first). Only
# where PID 1 is that `tail`: run outside the container by mistake it would kill whatever the user may.
KILL_ALL_BUT_INIT = ('{ read -r init < /proc/1/comm; } 2>/dev/null && [ "$init" = tail ] '
                     '&& kill -s KILL -- -1 2>/dev/null')


def container_script(cmd: str, timeout_s: float, login: bool = True) -> str:
    """The script ``docker exec`` runs: ``cmd`` in ``bash -lc`` (``bash -c`` unless ``login``) killed after
    ``timeout_s``, then every process left in the container (as the local sandbox kills all a command started), also
    before it (what a killed ``docker exec`` left); exits with ``cmd``'s status, 137 when the timeout killed it.

    ``cmd`` runs in a group whose shell stderr is /dev/null (its own on fd 3): bash's "Killed" notice for the timed out
    ``timeout`` stays out of the output."""
    run = f"timeout -s KILL {max(1, int(timeout_s))} bash -{'l' if login else ''}c {shlex.quote(cmd)}"
    return f"{KILL_ALL_BUT_INIT}; {{ {run} 2>&3 3>&-; }} 3>&2 2>/dev/null; rc=$?; {KILL_ALL_BUT_INIT}; exit $rc"


def docker_exec_argv(container: str, cmd: str, timeout_s: float, interactive: bool = False,
                     login: bool = True) -> list[str]:
    """``docker exec`` of :func:`container_script`: ``bash -lc cmd`` killed in-container after ``timeout_s``, and no
    process of it left behind."""
    return ["docker", "exec", *(["-i"] if interactive else []), "-w", WORKDIR, container, "bash", "-c",
            container_script(cmd, timeout_s, login)]


def docker_kill_argv(container: str) -> list[str]:
    """``docker exec`` ending every process in ``container`` but PID 1 (after the host killed a ``docker exec``: its
    command goes on in the container)."""
    return ["docker", "exec", "-w", WORKDIR, container, "bash", "-c", KILL_ALL_BUT_INIT]


@dataclass
class BoundedRun:
    """A finished CLI call: exit status, bounded captures of its output, whether the host had to kill it."""

    returncode: int
    stdout: OutputCapture
    stderr: OutputCapture
    killed_on_host: bool


def run_bounded(argv: list[str], timeout_s: float, cap: int, input_bytes: bytes | None = None,
                merge_stderr: bool = True) -> BoundedRun:
    """Run ``argv`` reading its output through :class:`OutputCapture` (``cap`` bytes of head and of tail, never all
    of it); killed after ``timeout_s``."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)
    out, err = OutputCapture(cap), OutputCapture(cap)
    threads = [threading.Thread(target=drain, args=(proc.stdout, out), daemon=True)]
    if not merge_stderr:
        threads.append(threading.Thread(target=drain, args=(proc.stderr, err), daemon=True))
    if input_bytes is not None:
        threads.append(threading.Thread(target=_feed, args=(proc.stdin, input_bytes), daemon=True))
    for t in threads:
        t.start()
    killed = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        killed = True
    for t in threads:
        t.join(timeout=5)
    return BoundedRun(proc.returncode, out, err, killed)


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (BrokenPipeError, OSError):  # the command exited without reading it all
        pass


@dataclass
class HarnessCall:
    """Everything one swebench ``run_instance`` call needs."""

    kwargs: dict[str, Any]
    run_id: str
    log_dir: Path  # relative to the working directory the call runs in


def swebench_harness() -> tuple[Callable[..., Any], Callable[..., Any], Callable[[], Any]]:
    """``(make_test_spec, run_instance, docker_client_factory)`` of the installed swebench."""
    try:
        from swebench.harness.run_evaluation import run_instance  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the docker backend needs `pip install trace-rl[swe]` (swebench)") from exc
    try:
        from swebench.harness.utils import make_test_spec  # noqa: PLC0415  (5.x)
    except ImportError:  # pragma: no cover - 4.x
        from swebench.harness.test_spec.test_spec import make_test_spec  # noqa: PLC0415
    import docker  # noqa: PLC0415

    return make_test_spec, run_instance, docker.from_env


def build_harness_call(task: SWETask, patch: str, run_id: str, timeout_s: int, client: Any,
                       make_test_spec: Callable[..., Any], run_instance: Callable[..., Any]) -> HarnessCall:
    """The keyword arguments of ``run_instance`` for this (task, patch), for swebench 5.x or 4.x."""
    row = task.to_row()
    params = inspect.signature(run_instance).parameters
    if "rm_image" in params:  # swebench 4.x: classic image chain, spec from MAP_REPO_VERSION_TO_SPECS
        spec = make_test_spec(row)
        extra = {"rm_image": False, "force_rebuild": False}
    else:
        missing = [k for k in ("image", "eval_script", "log_parser", "eval_type") if not row.get(k)]
        if missing:
            raise ValueError(
                f"{task.instance_id} lacks {', '.join(missing)}, which swebench>=5 needs in the row; "
                "use rows from the SWE-bench/* datasets or install swebench<5 for legacy rows"
            )
        spec = make_test_spec(row)
        extra = {}
    pred = {"instance_id": task.instance_id, "model_name_or_path": MODEL_NAME, "model_patch": patch}
    kwargs = {"test_spec": spec, "pred": pred, "client": client, "run_id": run_id, "timeout": timeout_s, **extra}
    log_dir = Path("logs/run_evaluation") / run_id / MODEL_NAME / task.instance_id
    return HarnessCall(kwargs, run_id, log_dir)


def run_harness(call: HarnessCall, run_instance: Callable[..., Any], task: SWETask, patch: str) -> EvalResult:
    """Run ``run_instance`` in a private cwd and read its ``report.json`` / ``test_output.txt``."""
    cwd = Path(tempfile.mkdtemp(prefix="trace-swe-harness-"))
    try:
        with _CWD_LOCK:  # swebench writes cwd-relative logs; chdir is process-wide
            old = os.getcwd()
            os.chdir(cwd)
            try:
                run_instance(**call.kwargs)
            finally:
                os.chdir(old)
        report_path = cwd / call.log_dir / "report.json"
        log_path = cwd / call.log_dir / "test_output.txt"
        log = log_path.read_text() if log_path.is_file() else ""
        ours = grade_log(task.instance_id, log, task.fail_to_pass, task.pass_to_pass, patch)
        if not report_path.is_file():
            ours.resolved, ours.error = False, "swebench wrote no report (see run_instance.log)"
            return ours
        entry = json.loads(report_path.read_text())[task.instance_id]
        status = entry.get("tests_status") or {}
        if status:
            ours.report = TestsReport(
                status["FAIL_TO_PASS"]["success"], status["FAIL_TO_PASS"]["failure"],
                status["PASS_TO_PASS"]["success"], status["PASS_TO_PASS"]["failure"],
            )
        ours.resolved = bool(entry.get("resolved"))
        ours.patch_applied = bool(entry.get("patch_successfully_applied"))
        return ours
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


class DockerBackend:
    """Agent container from the instance image; grading through the swebench harness."""

    name = "docker"

    def __init__(self, limits: SandboxLimits | None = None, eval_timeout_s: float = 1800.0):
        self.limits = limits or SandboxLimits()
        self.eval_timeout_s = eval_timeout_s
        self.task: SWETask | None = None
        self.container: str | None = None

    def start(self, task: SWETask) -> None:
        self.close()
        self.task = task
        name = f"trace-swe-{uuid.uuid4().hex[:12]}"
        res = subprocess.run(docker_run_argv(instance_image(task), name, self.limits.network, self.limits.memory_mb,
                                             self.limits.max_processes), capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"docker run failed for {task.instance_id}: {res.stderr.strip()}")
        self.container = name

    def _exec(self, cmd: str, timeout_s: float | None = None, input_text: str | None = None) -> ExecResult:
        if self.container is None:
            raise RuntimeError("backend not started")
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        argv = docker_exec_argv(self.container, cmd, timeout, interactive=input_text is not None)
        limit = self.limits.max_output_chars
        started = time.monotonic()
        res = run_bounded(argv, timeout + 30, 4 * limit,
                          input_text.encode("utf-8") if input_text is not None else None)
        # `timeout -s KILL` exits 137 at the deadline; so does a command the kernel killed (e.g. for memory)
        timed_out = res.killed_on_host or (res.returncode in (124, 137) and time.monotonic() - started >= timeout)
        if res.killed_on_host:
            self._kill_strays()
        return ExecResult(res.stdout.text(limit), -9 if res.killed_on_host else res.returncode, timed_out)

    def _exec_bytes(self, cmd: str) -> tuple[int, bytes, str]:
        """``(returncode, stdout, stderr)`` of ``cmd``: stdout whole (never truncated), stderr apart; no login shell
        (a profile that prints would corrupt the file or patch read)."""
        if self.container is None:
            raise RuntimeError("backend not started")
        timeout = self.limits.timeout_s
        res = run_bounded(docker_exec_argv(self.container, cmd, timeout, login=False), timeout + 30, MAX_READ_BYTES,
                          merge_stderr=False)
        if res.killed_on_host:
            self._kill_strays()
            return -9, b"", f"timed out after {timeout:g}s"
        err = res.stderr.text(4000).strip()[-2000:]
        out = res.stdout.data()
        if out is None:
            return -8, b"", f"the output is over {MAX_READ_BYTES} bytes; refusing to hold it"
        return res.returncode, out, err

    def _kill_strays(self) -> None:
        """End what a ``docker exec`` the host killed left running in the container (its own script never got to)."""
        assert self.container is not None
        try:
            subprocess.run(docker_kill_argv(self.container), capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):  # the next command's script kills them first anyway
            pass

    def run(self, cmd: str, timeout_s: float | None = None) -> ExecResult:
        return self._exec(cmd, timeout_s)

    def sandbox_info(self) -> dict:
        """The container is the confinement (Docker's namespaces); network, memory and processes per the limits."""
        return {"backend": "docker", "container": True, "network_namespace": not self.limits.network,
                "network": "host (allowed by config)" if self.limits.network else "none (--network none)",
                "memory_limit": f"{self.limits.memory_mb} MB (--memory, no swap)",
                "process_limit": f"{self.limits.max_processes} processes (--pids-limit)",
                "unavailable": [], "errors": {}}

    def _read_bytes(self, rel: str) -> bytes:
        q = shlex.quote(rel)
        rc, out, err = self._exec_bytes(f"if [ -e {q} ] && [ ! -f {q} ]; then echo 'not a regular file' >&2; exit 3; "
                                        f"fi; cat -- {q}")
        if rc == 3:
            raise ValueError(f"{rel} is not a regular file")
        if rc != 0:
            raise FileNotFoundError(f"{rel}: {err}" if err else rel)
        return out

    def read_file(self, rel: str) -> str:
        # the whole file (as the local backend reads it): the editor writes back what it read
        return self._read_bytes(rel).decode("utf-8", errors="replace")

    def write_file(self, rel: str, text: str) -> None:
        if self.exists(rel):
            try:
                self._read_bytes(rel).decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{rel} is not UTF-8 text: the editor would replace its other bytes; edit it with "
                                 "bash instead") from None
        q = shlex.quote(rel)
        res = self._exec(f"mkdir -p \"$(dirname -- {q})\" && cat > {q}", input_text=text)
        if res.returncode != 0:
            raise OSError(res.output)

    def exists(self, rel: str) -> bool:
        return self._exec(f"test -e {shlex.quote(rel or '.')}").returncode == 0

    def is_dir(self, rel: str) -> bool:
        return self._exec(f"test -d {shlex.quote(rel or '.')}").returncode == 0

    def file_size(self, rel: str) -> int:
        res = self._exec(f"stat -L -c %s -- {shlex.quote(rel)}")
        if res.returncode != 0 or not res.output.strip().isdigit():
            raise FileNotFoundError(f"{rel}: {res.output.strip()[-500:]}")
        return int(res.output.strip())

    def list_dir(self, rel: str, depth: int = 2) -> list[str]:
        res = self._exec(f"cd {shlex.quote(rel or '.')} && find . -mindepth 1 -maxdepth {depth} -not -path '*/.*'")
        return sorted(line[2:] for line in res.output.splitlines() if line.startswith("./"))

    def diff(self) -> str:
        """The whole submission (never truncated); ``DiffError`` when git fails (e.g. the agent removed ``.git``)."""
        assert self.task is not None
        rc, out, err = self._exec_bytes(diff_command(self.task.base_commit))
        if rc != 0:
            raise DiffError(f"could not diff the workspace (exit {rc}): {err}")
        return out.decode("utf-8", errors="surrogateescape")

    def base_file(self, rel: str) -> bytes | None:
        """``rel`` as the instance image holds it (the base commit), read in a fresh container; None if absent."""
        assert self.task is not None
        argv = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", instance_image(self.task),
                "--", f"{WORKDIR}/{rel}"]
        res = run_bounded(argv, 600, MAX_READ_BYTES, merge_stderr=False)
        return None if res.killed_on_host or res.returncode != 0 else res.stdout.data()

    def evaluate(self, patch: str) -> EvalResult:
        assert self.task is not None
        screened = screen_patch(patch, self.base_file)
        make_test_spec, run_instance, client_factory = swebench_harness()
        call = build_harness_call(self.task, patch_text(screened.patch), f"trace-{uuid.uuid4().hex}",
                                  int(self.eval_timeout_s), client_factory(), make_test_spec, run_instance)
        result = run_harness(call, run_instance, self.task, patch)
        result.dropped = screened.dropped
        return result

    def close(self) -> None:
        if self.container is not None:
            subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, timeout=120)
            self.container = None
