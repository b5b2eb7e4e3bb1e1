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


# files that configure how tests run, whatever directory they sit in: an agent's patch may not add or change them
RUNNER_CONFIG_FILES = frozenset({"pytest.ini", "tox.ini", "sitecustomize.py", "usercustomize.py"})
_PYTEST_SECTION = re.compile(r"^\+.*(\[(tool:)?pytest\]|\[tool\.pytest|addopts|pytest_plugins)", re.M)
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_FILE_LINE = re.compile(r"^(---|\+\+\+) (?:[ab]/)?(\S+)")
# extended header lines of one file's section in ``git diff`` output
_EXTENDED = ("index ", "new file mode ", "deleted file mode ", "old mode ", "new mode ", "similarity index ",
             "dissimilarity index ", "rename from ", "rename to ", "copy from ", "copy to ", "Binary files ",
             "GIT binary patch", "literal ", "delta ", "\\ No newline")


def is_protected_path(path: str) -> bool:
    """A path an agent's patch may not touch: tests (:func:`is_test_path`), test-runner configuration
    (``pytest.ini``, ``tox.ini``, ``sitecustomize.py``, ``*.pth``), git's own files, or anything outside the
    repository (absolute, ``..``)."""
    p = PurePosixPath(path)
    return (is_test_path(path) or p.name in RUNNER_CONFIG_FILES or p.suffix == ".pth" or path.startswith("/")
            or ".." in p.parts or ".git" in p.parts)


def chunk_paths(chunk: str) -> set[str] | None:
    """Every path one file chunk of ``git diff`` output names (its header, ``---``/``+++``, renames), read hunk
    by hunk so that a removed line starting with ``--`` is not taken for a file line; None when the chunk holds
    something else (e.g. a second file's section without its own ``diff --git`` header)."""
    lines = chunk.split("\n")
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        return None
    paths = {header.group(1), header.group(2)}
    i, file_lines, binary = 1, 0, False
    while i < len(lines):
        line = lines[i]
        if binary:  # base85 data lines to the end of the chunk; a file line there is another file's section
            if _FILE_LINE.match(line) or _HUNK.match(line):
                return None
            i += 1
            continue
        binary = line.startswith("GIT binary patch")
        hunk = _HUNK.match(line)
        if hunk:
            old, new = int(hunk.group(1) or 1), int(hunk.group(2) or 1)
            i += 1
            while (old > 0 or new > 0) and i < len(lines):
                body = lines[i]
                if body.startswith("\\"):
                    pass
                elif body.startswith("-"):
                    old -= 1
                elif body.startswith("+"):
                    new -= 1
                elif body.startswith(" ") or body == "":
                    old, new = old - 1, new - 1
                else:
                    return None
                i += 1
            continue
        file_line = _FILE_LINE.match(line)
        if file_line:
            file_lines += 1
            if file_lines > 2:  # a second file's ---/+++ pair glued onto this chunk
                return None
            if file_line.group(2) != "/dev/null":
                paths.add(file_line.group(2))
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            paths.add(line.split(" ", 2)[2])
        elif line and not line.startswith(_EXTENDED) and not line.startswith((" ", "+", "-")):
            return None
        i += 1
    return paths


def filter_patch(patch: str) -> str:
    """The agent's patch without the chunks it may not submit: those touching a protected path
    (:func:`is_protected_path`), those adding pytest settings to ``setup.cfg``/``pyproject.toml``, and any chunk
    that does not read as one file's section of ``git diff`` output (a workspace's ``.git/config`` can make the
    diff print anything); text before the first chunk is dropped too."""
    kept = []
    for chunk in split_patch(patch):
        paths = chunk_paths(chunk)
        if paths is None or any(is_protected_path(p) for p in paths):
            continue
        if any(PurePosixPath(p).name in ("setup.cfg", "pyproject.toml") for p in paths) and \
                _PYTEST_SECTION.search(chunk):
            continue
        kept.append(chunk)
    return "".join(kept)


def eval_script(base_commit: str, test_patch: str, workdir: str = "/testbed", test_cmd: str = DEFAULT_TEST_CMD,
                record_exit_code: bool = False) -> str:
    """The eval script: reset test files, apply the hidden tests, run them between the markers.

    ``record_exit_code`` adds the ``>>>>> Test Exit Code`` line the swebench 5 harness itself adds
    when it loads an ``eval.sh`` (so leave it off for task repos, on for local runs).
    """
    files = files_in_patch(test_patch)
    # hooks off: a workspace's .git/hooks (or core.hooksPath) must not run when the tests are reset
    reset = [f"git -c core.hooksPath=/dev/null checkout {base_commit} -- {shlex.quote(f)} 2>/dev/null || "
             f"rm -f {shlex.quote(f)}" for f in files]
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
