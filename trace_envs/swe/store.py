"""Pristine copies of task source trees: every episode and every grading checks out from one of these.

A plain source directory (the local tasks' ``repo/``) is committed once, at first use, into a private
git repository of the store (its commit must equal the task's ``base_commit``); every later checkout
clones that repository, so edits to the original directory (by an unconfined agent, or anyone) never
reach a later episode or the grader, and never make a reset fail. Git sources are cloned directly
(objects copied, never hard-linked: a workspace's ``.git`` is the agent's to scribble on).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

from trace_envs.swe.host_git import init_repo, is_git_repo

log = logging.getLogger(__name__)


class PristineStore:
    """Private git copies of plain source trees, keyed by (resolved path, base commit)."""

    def __init__(self, root: Path | None = None):
        self._root = Path(root) if root is not None else None
        self._own: weakref.finalize | None = None
        self._repos: dict[tuple[str, str], Path] = {}
        self._lock = threading.Lock()

    def _dir(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="trace-swe-store-"))
            self._own = weakref.finalize(self, shutil.rmtree, str(self._root), True)
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self._root

    def source_for(self, source: Path, base_commit: str | None) -> Path:
        """A git repository holding ``source`` at ``base_commit`` (pinned on first use for plain trees)."""
        source = Path(source)
        key = (str(source.resolve()), base_commit or "")
        with self._lock:
            if key in self._repos:
                return self._repos[key]
            if is_git_repo(source):
                return source
            if not source.is_dir():
                raise FileNotFoundError(f"task source tree {source} does not exist")
            dest = Path(tempfile.mkdtemp(prefix="src-", dir=self._dir()))
            tree = dest / "tree"
            shutil.copytree(source, tree, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache"))
            head = init_repo(tree)
            if base_commit and head != base_commit:
                shutil.rmtree(dest, ignore_errors=True)
                raise ValueError(f"tree {source} commits to {head}, not the task's base_commit {base_commit}")
            self._repos[key] = tree
            if not base_commit:
                self._repos[(key[0], head)] = tree
            log.debug("pinned %s at %s into %s", source, head, tree)
            return tree

    def pin(self, source: Path, base_commit: str | None) -> None:
        """Copy ``source`` in now (so the original may be removed or changed afterwards)."""
        self.source_for(source, base_commit)

    def close(self) -> None:
        """Remove every copy made (and the directory, when the store created it)."""
        with self._lock:
            for tree in set(self._repos.values()):
                if tree.name == "tree" and tree.parent.parent == self._root:
                    shutil.rmtree(tree.parent, ignore_errors=True)
            self._repos.clear()
            if self._own is not None:
                self._own()
                self._root, self._own = None, None


_default: PristineStore | None = None


def default_store() -> PristineStore:
    """The process-wide store of backends created without one (removed at interpreter exit)."""
    global _default
    if _default is None:
        _default = PristineStore()
    return _default
