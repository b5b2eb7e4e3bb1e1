"""Local subprocess sandbox: a temporary git checkout plus confined, rate-limited ``bash -c`` commands.

Each command runs in a fresh ``bash -c`` (no state carries over between commands except files),
launched by ``jail.py`` where the kernel allows it: in new user, mount, PID and network namespaces,
inside a new root that holds only the system and Python directories (read-only, trace-rl's own packages
hidden) and the workspace (``/testbed``), its home and ``/tmp`` (read-write), with no capabilities.
Nothing else of the host's filesystem exists there (task directories, grading material, sockets), and every process the
command started dies with it. ``resource.setrlimit`` caps each process (address space, file size,
CPU seconds); a watchdog caps the command's total memory and process count. What is in force is in
``Workspace.report``; whatever the machine does not allow is logged as a warning and listed there
(see ``confinement.py``). The environment is scrubbed (PATH, a private HOME, no proxies or API keys).
This keeps an agent away from the answer and the host; it is not hardened against kernel exploits
(use the docker backend or a VM for models you do not trust at all).
"""

from __future__ import annotations

import collections
import logging
import math
import os
import resource
import secrets
import select
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from trace_envs.swe import confinement as conf
from trace_envs.swe.host_git import GIT_IDENTITY, git, is_git_repo
from trace_envs.swe.store import PristineStore, default_store

log = logging.getLogger(__name__)

POLL_S = 0.05
EXIT_SETUP_FAILED = 125


@dataclass(frozen=True)
class SandboxLimits:
    """Per-command limits of the local sandbox (``memory_mb`` caps each process *and* their total)."""

    timeout_s: float = 30.0
    memory_mb: int = 2048
    file_size_mb: int = 64
    max_output_chars: int = 10_000
    network: bool = False
    max_processes: int = 256
    ro_paths: tuple[str, ...] = ()  # extra host paths the jail shows read-only

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "max_processes", "max_output_chars"):
            value = getattr(self, name)
            whole = name != "timeout_s"
            if (isinstance(value, bool) or not isinstance(value, int if whole else (int, float))
                    or not math.isfinite(value) or value <= 0):
                raise ValueError(f"sandbox limit {name} must be a positive {'integer' if whole else 'finite number'}, "
                                 f"got {value!r}")
        if isinstance(self.ro_paths, str) or not all(isinstance(p, str) and os.path.isabs(p) for p in self.ro_paths):
            raise ValueError(f"sandbox ro_paths must be a list of absolute paths, got {self.ro_paths!r}")


class DiffError(RuntimeError):
    """The workspace could not be diffed (the agent broke its ``.git``, or the diff failed or timed out)."""


# ``git diff`` options that ignore what the agent's own ``.git/config`` / ``.gitattributes`` say about the output's
# shape (external diff programs, textconv filters, path prefixes, colour, replaced objects): the submission is
# always a plain ``diff --git a/.. b/..`` patch of the real tree.
GIT_SAFE = ("git --no-replace-objects -c diff.external= -c core.hooksPath=/dev/null -c core.fsmonitor= "
            "-c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.relative=false -c core.quotePath=true")
DIFF_OPTS = "--no-ext-diff --no-textconv --no-color --src-prefix=a/ --dst-prefix=b/"


def diff_command(base_commit: str) -> str:
    """The shell command that prints the submission: every change since ``base_commit``, new files included."""
    return f"{GIT_SAFE} add -A && {GIT_SAFE} diff --cached {DIFF_OPTS} {base_commit}"


@dataclass
class ExecResult:
    output: str
    returncode: int
    timed_out: bool = False
    killed: str | None = None  # why the watchdog killed the command ("memory", "processes"), if it did
    stderr: str = ""  # only when stderr is not merged into ``output``


def network_isolation_available() -> bool:
    """True when commands can run in their own network namespace."""
    return conf.available().network_namespace


def truncate_output(text: str, limit: int) -> str:
    """Keep the head and tail of long output, with a notice of what was elided."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters elided] ...\n{text[-half:]}"


def patch_bytes(patch: str) -> bytes:
    """The bytes of a patch read with ``surrogateescape`` (a diff of files that are not UTF-8 stays exact)."""
    return patch.encode("utf-8", "surrogateescape")


def patch_text(patch: str) -> str:
    """A patch as plain text for display and logs (bytes that are not UTF-8 shown as U+FFFD)."""
    return patch_bytes(patch).decode("utf-8", "replace")


def sandbox_env(home: Path | str) -> dict[str, str]:
    """A minimal environment: interpreter dir first on PATH, private HOME, nothing secret.

    pytest plugin autoloading stays on, as in the swebench harness (a repo's configuration may need an installed
    plugin); what a patch could add to be autoloaded is refused by ``patches.is_protected_path``.
    """
    return {
        **conf.base_env(Path(home)),
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "GIT_CONFIG_NOSYSTEM": "1", "PAGER": "cat", "GIT_PAGER": "cat", **GIT_IDENTITY,
    }


def _limit_child(limits: SandboxLimits, cpu_s: int) -> None:  # runs in the child between fork and exec
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    size = limits.file_size_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))


def spawn(argv: list[str], cwd: Path, env: dict[str, str], limits: SandboxLimits, cpu_s: int, stdin=subprocess.DEVNULL,
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """Start ``argv`` (a launcher command line, ``confinement.launcher_argv``) in a session of its own, each process
    capped by ``limits`` (``RLIMIT_AS`` memory, ``RLIMIT_FSIZE`` file size) and ``cpu_s`` CPU seconds.

    The one place a sandboxed command is started: :func:`execute` (run to the end) and the LLM env worker
    (``trace_envs.synthesis.llm.worker_client``: a persistent process on pipes) both launch through it.
    """
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                            start_new_session=True, preexec_fn=lambda: _limit_child(limits, cpu_s), pass_fds=pass_fds)


class OutputCapture:
    """Head and tail of a byte stream (bounded memory however much a command prints)."""

    def __init__(self, cap: int):
        self.cap, self.total = cap, 0
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            while self.tail_len - len(self.tail[0]) >= self.cap:
                self.tail_len -= len(self.tail.popleft())

    def data(self) -> bytes | None:
        """Everything fed, when it fits in the head (``cap`` bytes); None when some of it was not kept."""
        return bytes(self.head) if self.total <= self.cap else None

    def text(self, limit: int, errors: str = "replace") -> str:
        """The captured output decoded (``errors="surrogateescape"`` keeps every byte), cut to ``limit`` chars."""
        tail = b"".join(self.tail)
        dropped = self.total - len(self.head) - len(tail)
        gap = f"\n... [{dropped} bytes elided] ...\n" if dropped else ""
        return truncate_output(self.head.decode("utf-8", errors) + gap + tail.decode("utf-8", errors), limit)


def drain(stream, capture: OutputCapture) -> None:
    """Feed everything ``stream`` yields into ``capture`` (a reader thread's loop)."""
    while chunk := stream.read1(65536):
        capture.feed(chunk)


class _exit_waiter:  # noqa: N801 - used like a function
    """``waiter(timeout) -> bool``: has ``proc`` exited? Wakes at once on exit where pidfds exist."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        try:
            self.fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.fd = None

    def __call__(self, timeout: float) -> bool:
        if self.fd is None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.poll(timeout * 1000)
        return self.proc.poll() is not None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def execute(argv: list[str], cwd: Path, env: dict[str, str], limits: SandboxLimits, timeout_s: float, token: str,
            scan: bool, merge_stderr: bool = True, max_chars: int | None = None,
            pass_fds: tuple[int, ...] = (), errors: str = "replace") -> ExecResult:
    """Run ``argv`` under ``limits``: time, total memory and process count watched; all its processes killed at the end.

    ``scan``: also find the command's processes by ``token`` in their environment (no PID namespace);
    ``errors``: how the output is decoded (``surrogateescape`` keeps bytes that are not UTF-8).
    """
    limit = max_chars or limits.max_output_chars
    proc = spawn(argv, cwd, env, limits, int(timeout_s) + 5,
                 stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, pass_fds=pass_fds)
    group = conf.SandboxProcesses(proc.pid, token, scan)
    out, err = OutputCapture(4 * limit), OutputCapture(4 * limit)
    readers = [threading.Thread(target=drain, args=(proc.stdout, out), daemon=True)]
    if not merge_stderr:
        readers.append(threading.Thread(target=drain, args=(proc.stderr, err), daemon=True))
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout_s
    timed_out, killed = False, None
    mem_limit = limits.memory_mb * 1024 * 1024
    exited = _exit_waiter(proc)
    while True:
        if exited(POLL_S):
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        pids = group.pids()
        if len(pids) > limits.max_processes + 2:  # + the launcher and PID 1
            killed = f"processes: {len(pids)} > {limits.max_processes}"
            break
        used = conf.anon_memory_bytes(pids)
        if used > mem_limit:
            killed = f"memory: {used // 2**20} MB > {limits.memory_mb} MB in total"
            break
    group.kill()  # whatever is left (everything, on timeout or watchdog kill) dies now
    proc.wait()
    exited.close()
    for t in readers:
        t.join(timeout=5)
    text = out.text(limit, errors)
    if killed:
        text += f"\n[sandbox] the command was killed: {killed}\n"
    return ExecResult(text, proc.returncode, timed_out, killed.split(":")[0] if killed else None,
                      err.text(limit) if not merge_stderr else "")


def materialize(source: Path, dest: Path, base_commit: str | None, store: PristineStore | None = None) -> str:
    """Check ``source`` out into ``dest`` at ``base_commit``; returns the commit checked out.

    The checkout comes from ``store`` (a plain directory is pinned there on first use and its commit
    must equal ``base_commit`` when one is given); git objects are copied, never hard-linked.
    """
    repo = (store or default_store()).source_for(Path(source), base_commit)
    if not is_git_repo(repo):
        raise ValueError(f"{repo} is not a git repository")
    git(dest.parent, "clone", "-q", "--no-checkout", "--no-hardlinks", str(repo), dest.name)
    git(dest, "checkout", "-q", "--detach", base_commit or "HEAD")
    git(dest, "remote", "remove", "origin", check=False)
    # only the base commit's history stays reachable: the source's branches and tags may point past it (the fix)
    refs = git(dest, "for-each-ref", "--format=%(refname)").split()
    if refs:
        git(dest, "update-ref", "--no-deref", "--stdin", input_text="".join(f"delete {ref}\n" for ref in refs))
    git(dest, "reflog", "expire", "--expire=now", "--all")
    git(dest, "gc", "-q", "--prune=now")
    git(dest, "config", "user.name", "trace-rl")
    git(dest, "config", "user.email", "trace-rl@localhost")
    return git(dest, "rev-parse", "HEAD").strip()


def _cleanup(tmp: str, token: str) -> None:
    survivors = conf.token_pids(f"{conf.TOKEN_VAR}={token}".encode())
    for pid in survivors:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    shutil.rmtree(tmp, ignore_errors=True)


class Workspace:
    """A temporary checkout of a task repo plus its confined command runner; removed by ``close()``."""

    def __init__(self, source: Path, base_commit: str | None, limits: SandboxLimits, prefix: str = "trace-swe-",
                 store: PristineStore | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self.token = secrets.token_hex(12)
        self._finalizer = weakref.finalize(self, _cleanup, str(self.tmp), self.token)
        self.limits = limits
        self.root = self.tmp / "repo"
        self.home = self.tmp / "home"
        self.scratch = self.tmp / "tmp"  # the commands' /tmp (inside the jail)
        self.jail_root = self.tmp / "jailroot"
        for d in (self.home, self.scratch, self.jail_root):
            d.mkdir()
        self.base_commit = materialize(Path(source), self.root, base_commit, store)
        self.avail = conf.available()
        self.report = conf.make_report(self.avail, limits.network, limits.memory_mb, limits.max_processes)
        self.jailed = self.avail.mount_namespace
        self.workdir = conf.JAIL_WORKDIR if self.jailed else str(self.root)
        self.env = {**sandbox_env(conf.JAIL_HOME if self.jailed else self.home), conf.TOKEN_VAR: self.token}

    def inside(self, path: Path) -> str:
        """Where a host path under the workspace's scratch dir or checkout appears to the commands."""
        path = Path(path)
        if not self.jailed:
            return str(path)
        for host, seen in ((self.scratch, "/tmp"), (self.root, conf.JAIL_WORKDIR), (self.home, conf.JAIL_HOME)):
            if path == host or host in path.parents:
                return seen + "/" + str(path.relative_to(host)) if path != host else seen
        raise ValueError(f"{path} is not visible inside the sandbox")

    def run(self, cmd: str, timeout_s: float | None = None, merge_stderr: bool = True,
            max_chars: int | None = None, errors: str = "replace") -> ExecResult:
        """``bash -c cmd`` in the workspace, confined as far as this machine allows (``self.report``)."""
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        a = self.avail
        spec = conf.launch_spec(self.jail_root, self.root, self.home, self.scratch, self.limits.network,
                                mount_ns=a.mount_namespace, pid_ns=a.pid_namespace, user_ns=a.user_namespace,
                                nproc=self.limits.max_processes + 4 if conf.nproc_rlimit_applies(a) else None,
                                extra_ro=self.limits.ro_paths)
        spec["net_ns"] = a.network_namespace and not self.limits.network
        r, w = os.pipe()
        try:
            spec["status_fd"] = w
            res = execute(conf.launcher_argv(spec, ["bash", "-c", cmd]), self.root, self.env, self.limits, timeout,
                          self.token, scan=not a.pid_namespace, merge_stderr=merge_stderr, max_chars=max_chars,
                          pass_fds=(w,), errors=errors)
            os.close(w)
            w = -1
            status = conf.read_all(r)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        if not status and not res.timed_out and not res.killed:
            raise RuntimeError(f"the sandbox launcher failed (exit {res.returncode}): {res.output[-2000:]}")
        return res

    def diff(self) -> str:
        """Everything changed since the base commit, new files included (``git add -A`` + cached diff), decoded
        with ``surrogateescape`` (:func:`patch_bytes` gives back its exact bytes).

        Runs inside the sandbox: the agent controls ``.git/config`` and ``.gitattributes`` (fsmonitor,
        filters), which must never run commands on the host.
        """
        res = self.run(diff_command(self.base_commit), merge_stderr=False, max_chars=50_000_000,
                       errors="surrogateescape")
        if res.returncode != 0 or res.timed_out or res.killed:
            raise DiffError(f"could not diff the workspace (exit {res.returncode}): {res.stderr.strip()[-2000:]}")
        return res.output

    def close(self) -> None:
        self._finalizer()
