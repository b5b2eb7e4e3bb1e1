"""Git on the host, with a fixed identity: the trees the agent never touches (pristine copies of task sources,
fresh checkouts before an episode). A fixed identity and date make a commit of identical content the same hash
(``gitobj`` computes that hash without git)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "trace-rl", "GIT_AUTHOR_EMAIL": "trace-rl@localhost",
    "GIT_COMMITTER_NAME": "trace-rl", "GIT_COMMITTER_EMAIL": "trace-rl@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def is_git_repo(path: Path) -> bool:
    """A work tree with ``.git`` or a bare repository."""
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def git(cwd: Path, *args: str, check: bool = True, input_text: str | None = None) -> str:
    """Run git with the fixed identity; returns stdout. Host-side: only on trees the agent never touched."""
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
    return git(tree, "rev-parse", "HEAD").strip()
