"""Execution backends for SWE episodes: the protocol and the ``local`` subprocess backend.

A backend owns one episode's sandbox: ``start(task)`` provisions a checkout of the task's base
commit, ``run`` executes agent commands, the file methods serve the editor tool, ``diff`` is the
submission (decoded with ``surrogateescape``, so ``evaluate`` applies its exact bytes), ``evaluate(patch)``
grades a patch *in a fresh checkout* (the hidden tests never enter the agent's workspace), ``close`` removes
everything and ``sandbox_info()`` says what confines the agent.
The ``docker`` backend lives in ``docker_backend.py`` and is picked by ``make_backend("auto")`` only
when a daemon answers.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath
from typing import Protocol

from trace_envs.swe import confinement
from trace_envs.swe.grading import APPLY_PATCH_FAIL, TESTS_TIMEOUT, EvalResult, grade_log
from trace_envs.swe.patches import eval_script, screen_patch
from trace_envs.swe.sandbox import ExecResult, SandboxLimits, Workspace, patch_bytes
from trace_envs.swe.store import PristineStore
from trace_envs.swe.task import SWETask

log = logging.getLogger(__name__)

GIT_APPLY_CMDS = ("git apply --verbose", "patch --batch --forward --fuzz=5 -p1 -i")


class BackendError(RuntimeError):
    """The backend cannot serve this task (e.g. no local source tree, no Docker daemon)."""


def repo_relative(path: str) -> str:
    """Normalise an agent-supplied path to a repo-relative POSIX path; refuse escapes."""
    p = path.strip()
    if not p:
        raise ValueError("empty path")
    if p.startswith("/"):
        if p != "/testbed" and not p.startswith("/testbed/"):  # /tmp/x or /testbed2/x is not a repo path
            raise ValueError(f"path {path!r} is outside the repository (/testbed); give a path under /testbed or "
                             "relative to it")
        p = p[len("/testbed"):]
    parts = [s for s in PurePosixPath(p.lstrip("/")).parts if s not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path {path!r} leaves the repository")
    if "\x00" in p:
        raise ValueError("path contains a NUL byte")
    return "/".join(parts)


class Backend(Protocol):
    name: str

    def start(self, task: SWETask) -> None: ...
    def run(self, cmd: str, timeout_s: float | None = None) -> ExecResult: ...
    def read_file(self, rel: str) -> str: ...
    def write_file(self, rel: str, text: str) -> None: ...
    def exists(self, rel: str) -> bool: ...
    def is_dir(self, rel: str) -> bool: ...
    def file_size(self, rel: str) -> int: ...
    def list_dir(self, rel: str, depth: int = 2) -> list[str]: ...
    def diff(self) -> str: ...
    def evaluate(self, patch: str) -> EvalResult: ...
    def sandbox_info(self) -> dict: ...
    def close(self) -> None: ...


class LocalBackend:
    """Temporary git checkout + confined subprocess sandbox; grading in a second fresh checkout.

    Checkouts come from ``store`` (pristine copies of the task trees; the process-wide one by default).
    File methods (the editor's) refuse paths that resolve, symlinks followed, outside the checkout.
    """

    name = "local"

    def __init__(self, limits: SandboxLimits | None = None, eval_timeout_s: float = 120.0,
                 store: PristineStore | None = None):
        self.limits = limits or SandboxLimits()
        self.eval_timeout_s = eval_timeout_s
        self.store = store
        self.task: SWETask | None = None
        self.ws: Workspace | None = None

    def start(self, task: SWETask) -> None:
        if task.repo_path is None:
            raise BackendError(
                f"the local backend needs the source tree of {task.instance_id} ({task.repo}): pass "
                "`repos_dir` holding a clone named owner__repo, or use the docker backend"
            )
        self.close()
        self.task = task
        self.ws = Workspace(task.repo_path, task.base_commit or None, self.limits, store=self.store)

    def _ws(self) -> Workspace:
        if self.ws is None:
            raise BackendError("backend not started")
        return self.ws

    def _abs(self, rel: str) -> Path:
        """The host path of ``rel``, symlinks resolved; refuses anything that lands outside the checkout."""
        root = self._ws().root.resolve()
        target = (root / rel).resolve() if rel else root
        if target != root and root not in target.parents:
            raise ValueError(f"the path {rel} resolves outside the repository (symlink); refusing it")
        return target

    def run(self, cmd: str, timeout_s: float | None = None) -> ExecResult:
        return self._ws().run(cmd, timeout_s)

    def _regular(self, rel: str) -> Path:
        """``_abs(rel)``, refusing FIFOs, sockets and devices (opening a FIFO would hang the host)."""
        target = self._abs(rel)
        if target.exists() and not target.is_file():
            raise ValueError(f"{rel} is not a regular file")
        return target

    def read_file(self, rel: str) -> str:
        # bytes, not read_text: universal newlines would turn every CRLF into LF on the next write
        return self._regular(rel).read_bytes().decode("utf-8", errors="replace")

    def write_file(self, rel: str, text: str) -> None:
        target = self._regular(rel)
        if target.exists():
            try:
                target.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{rel} is not UTF-8 text: the editor would replace its other bytes; edit it with "
                                 "bash instead") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))

    def exists(self, rel: str) -> bool:
        return self._abs(rel).exists()

    def is_dir(self, rel: str) -> bool:
        return self._abs(rel).is_dir()

    def file_size(self, rel: str) -> int:
        return self._regular(rel).stat().st_size

    def list_dir(self, rel: str, depth: int = 2, limit: int = 10_000) -> list[str]:
        """Entries ``depth`` levels deep (hidden ones and ``__pycache__`` left out), at most ``limit`` of them:
        only those levels are walked, so a huge tree below costs nothing."""
        out: list[str] = []
        level = [(self._abs(rel), "")]
        for _ in range(depth):
            below = []
            for directory, prefix in level:
                try:
                    entries = sorted(os.scandir(directory), key=lambda e: e.name)
                except OSError:
                    continue
                for entry in entries:
                    if entry.name.startswith(".") or entry.name == "__pycache__" or len(out) >= limit:
                        continue
                    out.append(prefix + entry.name + ("/" if entry.is_dir() else ""))
                    if entry.is_dir(follow_symlinks=False):  # a link may lead out of the checkout
                        below.append((Path(entry.path), prefix + entry.name + "/"))
            level = below
        return sorted(out, key=lambda p: PurePosixPath(p).parts)

    def diff(self) -> str:
        return self._ws().diff()

    def evaluate(self, patch: str) -> EvalResult:
        """Apply ``patch`` (test files dropped) to a fresh checkout, run the hidden tests, grade."""
        task = self.task
        if task is None:
            raise BackendError("backend not started")
        limits = SandboxLimits(self.eval_timeout_s, self.limits.memory_mb, self.limits.file_size_mb,
                               max_output_chars=5_000_000, network=self.limits.network,
                               max_processes=self.limits.max_processes, ro_paths=self.limits.ro_paths)
        ws = Workspace(task.repo_path, task.base_commit or None, limits, prefix="trace-swe-eval-", store=self.store)
        try:
            screened = screen_patch(patch, lambda rel: _base_bytes(ws.root, rel))
            result = _grade(ws, task, screened.patch, patch)
            result.dropped = screened.dropped
            return result
        finally:
            ws.close()

    def sandbox_info(self) -> dict:
        """What confines the agent's commands (``SandboxReport``), missing confinements listed."""
        if self.ws is not None:
            return self.ws.report.as_dict()
        return confinement.make_report(confinement.available(), self.limits.network, self.limits.memory_mb,
                           self.limits.max_processes).as_dict()

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
            self.ws = None


def _grade(ws: Workspace, task: SWETask, model_patch: str, patch: str) -> EvalResult:
    """Apply the screened ``model_patch`` (its exact bytes) in ``ws``, run the hidden tests, grade ``patch``."""
    if model_patch.strip():
        patch_file = ws.scratch / "model.patch"
        patch_file.write_bytes(patch_bytes(model_patch))
        for cmd in GIT_APPLY_CMDS:
            res = ws.run(f"{cmd} {ws.inside(patch_file)}")
            if res.returncode == 0:
                break
            ws.run("git checkout -- . && git clean -fdq")
        else:
            return grade_log(task.instance_id, f"{APPLY_PATCH_FAIL}:\n{res.output}",
                             task.fail_to_pass, task.pass_to_pass, patch)
    script = ws.scratch / "eval.sh"
    script.write_text(eval_script(ws.base_commit, task.test_patch, ws.workdir, task.test_cmd, record_exit_code=True))
    res = ws.run(f"bash {ws.inside(script)}")
    text = res.output + (f"\n{TESTS_TIMEOUT}\n" if res.timed_out else "")
    return grade_log(task.instance_id, text, task.fail_to_pass, task.pass_to_pass, patch)


def _base_bytes(root: Path, rel: str) -> bytes | None:
    """The base commit's bytes of ``rel`` in a fresh checkout (None when absent, not a regular file, or outside)."""
    target = (root / rel).resolve()
    if root.resolve() not in target.parents or not target.is_file():
        return None
    return target.read_bytes()


def make_backend(kind: str = "auto", limits: SandboxLimits | None = None, eval_timeout_s: float = 120.0,
                 store: PristineStore | None = None) -> Backend:
    """``local``, ``docker``, or ``auto`` (docker iff ``docker info`` succeeds, else local)."""
    from trace_envs.swe.docker_backend import DockerBackend, docker_available  # noqa: PLC0415

    if kind == "auto":
        kind = "docker" if docker_available() else "local"
    if kind == "local":
        return LocalBackend(limits, eval_timeout_s, store)
    if kind == "docker":
        if not docker_available():
            raise BackendError("the docker backend needs a running Docker daemon (`docker info` failed)")
        return DockerBackend(limits or SandboxLimits(), eval_timeout_s)
    raise ValueError(f"unknown backend {kind!r}; use local, docker or auto")
