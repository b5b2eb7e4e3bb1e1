"""Unified-diff helpers and the eval script (swebench layout: markers around ``pytest -rA``)."""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

from trace_envs.swe.grading import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
HEREDOC = "EOF_TRACE_TEST_PATCH"
_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)
_EXIT_VAR = "TRACE_TEST_EXIT_CODE"


def split_patch(patch: str) -> list[str]:
    """One chunk per file (each starting with ``diff --git``)."""
    starts = [m.start() for m in _HEADER.finditer(patch)]
    return [patch[a:b] for a, b in zip(starts, [*starts[1:], len(patch)])]


def files_in_patch(patch: str) -> list[str]:
    """Paths a patch touches (the ``b/`` side), in order."""
    return [m.group(2) for m in _HEADER.finditer(patch)]


def is_test_path(path: str) -> bool:
    """Test files and directories the agent must not change (they are reset at evaluation)."""
    p = PurePosixPath(path)
    if any(part in ("tests", "test", "testing") for part in p.parts[:-1]):
        return True
    name = p.name
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name[:-3].endswith("_test")))


def filter_patch(patch: str) -> str:
    """Drop every file chunk that touches a test path."""
    return "".join(chunk for chunk in split_patch(patch) if not is_test_path(files_in_patch(chunk)[0]))


def eval_script(base_commit: str, test_patch: str, workdir: str = "/testbed", test_cmd: str = DEFAULT_TEST_CMD,
                record_exit_code: bool = False) -> str:
    """The eval script: reset test files, apply the hidden tests, run them between the markers.

    ``record_exit_code`` adds the ``>>>>> Test Exit Code`` line the swebench 5 harness itself adds
    when it loads an ``eval.sh`` (so leave it off for task repos, on for local runs).
    """
    files = files_in_patch(test_patch)
    reset = [f"git checkout {base_commit} -- {shlex.quote(f)} 2>/dev/null || rm -f {shlex.quote(f)}" for f in files]
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        f"cd {shlex.quote(workdir)}",
        *reset,
        f"git apply -v - <<'{HEREDOC}'",
        test_patch.rstrip("\n"),
        HEREDOC,
        f"echo '{START_TEST_OUTPUT}'",
        f"{test_cmd} {' '.join(shlex.quote(f) for f in files)}",
    ]
    if record_exit_code:
        lines.append(f"{_EXIT_VAR}=$?")
    lines.append(f"echo '{END_TEST_OUTPUT}'")
    if record_exit_code:
        lines.append(f'echo "{TEST_EXIT_CODE}: ${_EXIT_VAR}"')
    lines.extend(reset)
    return "\n".join(lines) + "\n"
