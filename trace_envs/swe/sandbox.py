"""Local subprocess sandbox: a temporary git checkout plus rate-limited ``bash -c`` commands.

Each command runs in a fresh ``bash -c`` (no state carries over between commands except files),
with the workspace as cwd, in its own session (the whole process group is killed on timeout), under
``resource.setrlimit`` limits (address space, file size, CPU seconds), with a scrubbed environment
(PATH, a private HOME, no proxies or API keys) and, where the kernel allows unprivileged user
namespaces, without network (``unshare -rn``). This is *not* a security boundary: it stops runaway
and accidental damage, not a determined attacker.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "trace-rl", "GIT_AUTHOR_EMAIL": "trace-rl@localhost",
    "GIT_COMMITTER_NAME": "trace-rl", "GIT_COMMITTER_EMAIL": "trace-rl@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


@dataclass(frozen=True)
class SandboxLimits:
    """Per-command limits of the local sandbox."""

    timeout_s: float = 30.0
    memory_mb: int = 2048
    file_size_mb: int = 64
    max_output_chars: int = 10_000
    network: bool = False


@dataclass
class ExecResult:
    output: str
    returncode: int
    timed_out: bool = False


@functools.lru_cache(maxsize=1)
def network_isolation_available() -> bool:
    """True when ``unshare -rn`` works here (unprivileged user + network namespaces)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def truncate_output(text: str, limit: int) -> str:
    """Keep the head and tail of long output, with a notice of what was elided."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters elided] ...\n{text[-half:]}"


def sandbox_env(home: Path) -> dict[str, str]:
    """A minimal environment: interpreter dir first on PATH, private HOME, nothing secret."""
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return {
        "PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "GIT_CONFIG_NOSYSTEM": "1", "PAGER": "cat", "GIT_PAGER": "cat", **GIT_IDENTITY,
    }


def _limit_child(limits: SandboxLimits) -> None:  # runs in the child between fork and exec
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    size = limits.file_size_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    cpu = int(limits.timeout_s) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))


def run_command(cmd: str, cwd: Path, env: dict[str, str], limits: SandboxLimits,
                timeout_s: float | None = None) -> ExecResult:
    """Run ``bash -c cmd`` under ``limits``; a timeout kills the whole process group."""
    timeout = limits.timeout_s if timeout_s is None else timeout_s
    eff = SandboxLimits(timeout, limits.memory_mb, limits.file_size_mb, limits.max_output_chars, limits.network)
    argv = ["bash", "-c", cmd]
    if not limits.network and network_isolation_available():
        argv = ["unshare", "-rn", *argv]
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=lambda: _limit_child(eff),
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild escaped the group and holds the pipe
            proc.kill()
            out = b""
        timed_out = True
    text = out.decode("utf-8", errors="replace")
    return ExecResult(truncate_output(text, limits.max_output_chars), proc.returncode, timed_out)


def git(cwd: Path, *args: str, check: bool = True, input_text: str | None = None) -> str:
    """Run git with the fixed identity; returns stdout."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1"}
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, input=input_text)
    if check and res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {res.stderr.strip()}")
    return res.stdout


def init_repo(tree: Path) -> str:
    """``git init`` + one commit of everything under ``tree`` with a fixed identity; returns the hash.

    Identical content gives an identical hash, so a generated base commit is reproducible.
    """
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "--no-verify", "-m", "base")
    return (tree / ".git" / "refs" / "heads" / "main").read_text().strip()


def materialize(source: Path, dest: Path, base_commit: str | None) -> str:
    """Check ``source`` out into ``dest`` at ``base_commit``; returns the commit checked out.

    A git repository is cloned and checked out at ``base_commit``; a plain directory is copied and
    committed (its hash must equal ``base_commit`` when one is given).
    """
    if (source / ".git").exists():
        git(dest.parent, "clone", "-q", "--no-checkout", str(source), dest.name)
        git(dest, "checkout", "-q", base_commit or "HEAD")
        git(dest, "remote", "remove", "origin", check=False)
        git(dest, "config", "user.name", "trace-rl")
        git(dest, "config", "user.email", "trace-rl@localhost")
        return git(dest, "rev-parse", "HEAD").strip()
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache"))
    head = init_repo(dest)
    if base_commit and head != base_commit:
        raise ValueError(f"tree {source} commits to {head}, not the task's base_commit {base_commit}")
    return head


class Workspace:
    """A temporary checkout of a task repo; removed by ``close()`` (also at garbage collection)."""

    def __init__(self, source: Path, base_commit: str | None, limits: SandboxLimits, prefix: str = "trace-swe-"):
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.tmp), True)
        self.limits = limits
        self.root = self.tmp / "repo"
        self.home = self.tmp / "home"
        self.home.mkdir()
        self.base_commit = materialize(Path(source), self.root, base_commit)
        self.env = sandbox_env(self.home)

    def run(self, cmd: str, timeout_s: float | None = None) -> ExecResult:
        return run_command(cmd, self.root, self.env, self.limits, timeout_s)

    def diff(self) -> str:
        """Everything changed since the base commit, new files included (``git add -A`` + cached diff)."""
        git(self.root, "add", "-A")
        return git(self.root, "diff", "--cached", "--no-color", self.base_commit)

    def close(self) -> None:
        self._finalizer()
