"""Unified-diff helpers and the eval script (swebench layout: markers around ``pytest -rA``).

What an agent's patch may carry into grading is decided by file *name* wherever possible
(:func:`is_protected_path`): tests, every pytest configuration file name (``pytest.ini``, ``.pytest.ini``,
``pytest.toml``, ``.pytest.toml``, ``tox.ini``), interpreter start-up hooks (``sitecustomize.py``,
``usercustomize.py``, ``*.pth``), package metadata through which an installed-distribution scan finds plugins
(``*.egg-info/``, ``*.dist-info/``, ``*.egg``, ``*.egg-link``, ``entry_points.txt``), git's own files and
paths outside the repository. Symlinks (mode 120000) are refused altogether: a link can give a harmless name
the content of a refused file. ``setup.cfg`` and ``pyproject.toml`` hold more than pytest settings, so a chunk
touching one is kept only when its pytest settings (``[tool:pytest]``/``[pytest]`` sections; the
``tool.pytest`` table read with ``tomllib``) are the same before and after the chunk, which needs the file's
base content (``base_file``). Without it, such a chunk is kept only when it adds a new file, or (``setup.cfg``)
when each changed line sits under a non-pytest section header shown in its own hunk.

Grading runs pytest with plugin autoloading *on*, as the swebench harness does (a repo's configuration may
need an installed plugin, e.g. ``--timeout``). Autoloading finds plugins through installed distributions'
``entry_points.txt``; that is why a patch may not add package metadata anywhere in the tree (the checkout is
on ``sys.path`` when ``python -m pytest`` runs there).
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Callable

from trace_envs.swe.grading import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider"
HEREDOC = "EOF_TRACE_TEST_PATCH"
DIFF_GIT = "diff --git "
_EXIT_VAR = "TRACE_TEST_EXIT_CODE"
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(text: str) -> tuple[str, str] | None:
    """``(path, rest)`` for a C-style quoted path at the start of ``text`` (git's ``core.quotePath`` form:
    escapes and octal bytes of UTF-8); None when it is not well formed."""
    if not text.startswith('"'):
        return None
    out, i = bytearray(), 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return out.decode("utf-8", "surrogateescape"), text[i + 1:]
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = text[i + 1:i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1:i + 4]):
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            return None
    return None


def _strip_prefix(path: str, prefix: str) -> str | None:
    return path[len(prefix):] if path.startswith(prefix) else None


def header_paths(line: str) -> tuple[str, str] | None:
    """The two repo paths of a ``diff --git a/X b/Y`` line, quoted or not; None when it does not read as one.
    An unquoted header with spaces is ambiguous unless both sides are equal (as git itself reads it)."""
    if not line.startswith(DIFF_GIT):
        return None
    rest = line[len(DIFF_GIT):]
    first = _unquote(rest)
    if first is not None:
        a, rest = first
        if not rest.startswith(" "):
            return None
        rest = rest[1:]
    else:
        a = None
    second = _unquote(rest) if a is not None else None
    if a is not None and second is not None:
        b, tail = second
        if tail:
            return None
    elif a is not None:
        b = rest
    elif rest.endswith('"'):  # a/plain "b/quoted"
        q = rest.rfind(' "')
        if q < 0 or (second := _unquote(rest[q + 1:])) is None or second[1]:
            return None
        a, b = rest[:q], second[0]
    else:  # both unquoted: "a/X b/X" (paths may hold spaces)
        half = (len(rest) - 1) // 2
        if len(rest) % 2 == 1 and rest[half] == " " and rest[2:half] == rest[half + 3:]:
            a, b = rest[:half], rest[half + 1:]
        else:
            parts = rest.split(" b/")
            if len(parts) != 2:
                return None
            a, b = parts[0], "b/" + parts[1]
    a, b = _strip_prefix(a, "a/"), _strip_prefix(b, "b/")
    return (a, b) if a and b else None


def _chunk_starts(patch: str) -> list[int]:
    return [m.start() for m in re.finditer(r"^diff --git ", patch, re.M)]


def split_patch(patch: str) -> list[str]:
    """One chunk per file: each starts at a line beginning with ``diff --git ``; text before the first is dropped."""
    starts = _chunk_starts(patch)
    return [patch[a:b] for a, b in zip(starts, [*starts[1:], len(patch)])]


def files_in_patch(patch: str) -> list[str]:
    """Paths a patch touches (the ``b/`` side), in order."""
    out = []
    for chunk in split_patch(patch):
        paths = header_paths(chunk.split("\n", 1)[0])
        if paths is not None:
            out.append(paths[1])
    return out


def is_test_path(path: str) -> bool:
    """Test files and directories the agent must not change (they are reset at evaluation)."""
    p = PurePosixPath(path)
    if any(part in ("tests", "test", "testing") for part in p.parts[:-1]):
        return True
    name = p.name
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name[:-3].endswith("_test")))


# files that configure how tests run, whatever directory they sit in: an agent's patch may not add or change them
RUNNER_CONFIG_FILES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                                 "sitecustomize.py", "usercustomize.py", "entry_points.txt"})
# directory/file suffixes through which importlib.metadata / pkg_resources find installed distributions (plugins)
PACKAGE_METADATA_SUFFIXES = (".egg-info", ".dist-info", ".egg", ".egg-link", ".pth")
# files whose pytest settings are compared before and after the chunk (the rest of them may change)
MIXED_CONFIG_FILES = frozenset({"setup.cfg", "pyproject.toml"})
SYMLINK_MODE = "120000"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# extended header lines of one file's section in ``git diff`` output
_EXTENDED = ("index ", "new file mode ", "deleted file mode ", "old mode ", "new mode ", "similarity index ",
             "dissimilarity index ", "rename from ", "rename to ", "copy from ", "copy to ", "Binary files ",
             "GIT binary patch", "literal ", "delta ", "\\ No newline")
_NAME_LINES = ("rename from ", "rename to ", "copy from ", "copy to ")


def is_protected_path(path: str) -> bool:
    """A path an agent's patch may not touch: tests (:func:`is_test_path`), test-runner configuration and
    start-up hooks (``RUNNER_CONFIG_FILES``, ``*.pth``), package metadata (``*.egg-info/``, ``*.dist-info/``, ...),
    git's own files, or anything outside the repository (absolute, ``..``)."""
    p = PurePosixPath(path)
    return (is_test_path(path) or p.name in RUNNER_CONFIG_FILES or path.startswith("/") or ".." in p.parts
            or ".git" in p.parts or any(part.lower().endswith(PACKAGE_METADATA_SUFFIXES) for part in p.parts))


def _file_line_path(line: str) -> str | None:
    """The path of a ``---``/``+++`` line (``/dev/null`` kept; git adds a tab after a name with spaces)."""
    rest = line[4:]
    quoted = _unquote(rest)
    if quoted is not None:
        name = quoted[0]
    else:
        name = rest.split("\t", 1)[0]
    if name == "/dev/null":
        return name
    return _strip_prefix(name, "a/") or _strip_prefix(name, "b/")


def _name_line_path(line: str) -> str:
    value = line.split(" ", 2)[2]
    quoted = _unquote(value)
    return quoted[0] if quoted is not None and not quoted[1] else value


@dataclass
class ChunkInfo:
    """What one file chunk of ``git diff`` output says: the paths it names and whether a symlink is involved."""

    paths: set[str]
    symlink: bool = False
    new_file: bool = False


def read_chunk(chunk: str) -> ChunkInfo | None:
    """Every path one file chunk of ``git diff`` output names (its header, ``---``/``+++``, renames), read hunk
    by hunk so that a removed line starting with ``--`` is not taken for a file line; None when the chunk holds
    something else (e.g. a second file's section without its own ``diff --git`` header)."""
    lines = chunk.split("\n")
    header = header_paths(lines[0]) if lines else None
    if header is None:
        return None
    info = ChunkInfo(set(header))
    i, file_lines, binary = 1, 0, False
    while i < len(lines):
        line = lines[i]
        if binary:  # base85 data lines to the end of the chunk; a file line there is another file's section
            if line.startswith(("--- ", "+++ ")) or _HUNK.match(line):
                return None
            i += 1
            continue
        binary = line.startswith("GIT binary patch")
        hunk = _HUNK.match(line)
        if hunk:
            old, new = int(hunk.group(2) or 1), int(hunk.group(4) or 1)
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
        if line.startswith(("--- ", "+++ ")):
            file_lines += 1
            path = _file_line_path(line)
            if file_lines > 2 or path is None:  # a second file's ---/+++ pair glued onto this chunk
                return None
            if path != "/dev/null":
                info.paths.add(path)
        elif line.startswith(_NAME_LINES):
            info.paths.add(_name_line_path(line))
        elif line.startswith(("new file mode ", "deleted file mode ", "old mode ", "new mode ")):
            info.symlink |= line.rsplit(" ", 1)[1] == SYMLINK_MODE
            info.new_file |= line.startswith("new file mode ")
        elif line.startswith("index ") and line.rsplit(" ", 1)[-1] == SYMLINK_MODE:
            info.symlink = True
        elif line and not line.startswith(_EXTENDED) and not line.startswith((" ", "+", "-")):
            return None
        i += 1
    return info


def chunk_paths(chunk: str) -> set[str] | None:
    """The paths :func:`read_chunk` finds in one chunk; None when it is not one file's section."""
    info = read_chunk(chunk)
    return None if info is None else info.paths


def apply_chunk(base: str, chunk: str) -> str | None:
    """``base`` with the hunks of one text chunk applied at exactly their stated lines (no offset, no fuzz);
    None when a hunk does not match or the chunk carries binary data."""
    if "\nGIT binary patch" in chunk:
        return None
    old_lines = base.split("\n")
    out: list[str] = []
    pos = 0  # lines of ``old_lines`` consumed
    lines = chunk.split("\n")
    i = 0
    while i < len(lines):
        hunk = _HUNK.match(lines[i])
        i += 1
        if not hunk:
            continue
        start = int(hunk.group(1)) - (0 if hunk.group(2) == "0" else 1)
        if start < pos:
            return None
        out.extend(old_lines[pos:start])
        pos = start
        old, new = int(hunk.group(2) or 1), int(hunk.group(4) or 1)
        while (old > 0 or new > 0) and i < len(lines):
            body = lines[i]
            i += 1
            if body.startswith("\\"):
                continue
            text = body[1:]
            if body.startswith("+"):
                out.append(text)
                new -= 1
                continue
            if pos >= len(old_lines) or old_lines[pos] != text:
                return None
            if not body.startswith("-"):
                out.append(text)
                new -= 1
            pos += 1
            old -= 1
    out.extend(old_lines[pos:])
    return "\n".join(out)


def _ini_pytest_sections(text: str) -> tuple[tuple[str, ...], ...]:
    """The ``[...]`` sections of an ini text whose header mentions pytest, verbatim. Sections are split both where
    ``iniconfig`` splits them (a ``[`` in column 0) and where ``configparser`` may (an indented ``[``), so a
    change hidden from one reading is seen by the other."""
    views = []
    for indented in (False, True):
        sections: list[list[str]] = []
        current: list[str] | None = None
        for line in text.splitlines():  # iniconfig splits on every line boundary str.splitlines knows
            if (line.lstrip() if indented else line).startswith("["):
                current = [line] if "pytest" in line.lower() else None
                if current is not None:
                    sections.append(current)
            elif current is not None:
                current.append(line)
        views.append(tuple(tuple(section) for section in sections))
    return tuple(views)


def _toml_pytest(text: str) -> object:
    return tomllib.loads(text).get("tool", {}).get("pytest")


def pytest_settings_changed(name: str, before: str, after: str) -> bool:
    """True when ``after`` (a ``setup.cfg`` or ``pyproject.toml``) has other pytest settings than ``before``, or when
    ``after`` cannot be parsed."""
    if name == "pyproject.toml":
        try:
            new = _toml_pytest(after)
        except (ValueError, AttributeError):  # TOMLDecodeError is a ValueError
            return True
        try:
            old = _toml_pytest(before)
        except (ValueError, AttributeError):
            old = None
        return new != old
    return _ini_pytest_sections(before) != _ini_pytest_sections(after)


def _hunk_bodies(chunk: str) -> list[list[str]]:
    """The body lines of each hunk of a text chunk."""
    lines, out, i = chunk.split("\n"), [], 0
    while i < len(lines):
        hunk = _HUNK.match(lines[i])
        i += 1
        if not hunk:
            continue
        old, new, body = int(hunk.group(2) or 1), int(hunk.group(4) or 1), []
        while (old > 0 or new > 0) and i < len(lines):
            line = lines[i]
            i += 1
            body.append(line)
            if not line.startswith("\\"):
                old -= not line.startswith("+")
                new -= not line.startswith("-")
        out.append(body)
    return out


def _ini_hunks_stay_out_of_pytest(chunk: str) -> bool:
    """Without the base file: True when every changed line of every hunk sits below a section header the hunk itself
    shows (in both readings of :func:`_ini_pytest_sections`) that does not mention pytest, and no changed line is,
    or hides, a section header or mentions pytest."""
    for body in _hunk_bodies(chunk):
        col0: str | None = None
        indented: str | None = None
        for line in body:
            kind = line[:1]
            for piece in line[1:].splitlines() or [""]:
                starts_col0, starts_any = piece.startswith("["), piece.lstrip().startswith("[")
                if kind in ("+", "-"):
                    if starts_any or "pytest" in piece.lower() or col0 is None or indented is None \
                            or "pytest" in col0.lower() or "pytest" in indented.lower():
                        return False
                if starts_col0:
                    col0 = piece
                if starts_any:
                    indented = piece
    return True


@dataclass
class ScreenedPatch:
    """The part of a patch that may be graded, and one line per refused chunk (``path: reason``)."""

    patch: str
    dropped: list[str] = field(default_factory=list)


def _first_line(chunk: str) -> str:
    return chunk.split("\n", 1)[0][:200]


def screen_patch(patch: str, base_file: Callable[[str], bytes | None] | None = None) -> ScreenedPatch:
    """The agent's patch without the chunks it may not submit (see the module doc): those touching a protected
    path, symlinks, changes of pytest settings in ``setup.cfg``/``pyproject.toml`` and any chunk that does not read
    as one file's section of ``git diff`` output (a workspace's ``.git/config`` can make the diff print anything).

    ``base_file(path)``: the base commit's bytes of ``path`` (None when it has none); without it a chunk changing
    an existing ``setup.cfg``/``pyproject.toml`` is refused.
    """
    kept, dropped = [], []
    starts = _chunk_starts(patch)
    head = patch[:starts[0]] if starts else patch
    if head.strip():
        dropped.append(f"{head.strip()[:80]!r}: text before the first file section")
    for chunk in split_patch(patch):
        info = read_chunk(chunk)
        if info is None:
            dropped.append(f"{_first_line(chunk)}: not one file's section of git diff output")
            continue
        shown = ", ".join(sorted(info.paths))
        protected = sorted(p for p in info.paths if is_protected_path(p))
        if protected:
            dropped.append(f"{shown}: protected path {', '.join(protected)}")
            continue
        if info.symlink:
            dropped.append(f"{shown}: symlink (mode {SYMLINK_MODE})")
            continue
        reason = _mixed_config_reason(chunk, info, base_file)
        if reason:
            dropped.append(f"{shown}: {reason}")
            continue
        kept.append(chunk)
    return ScreenedPatch("".join(kept), dropped)


def _mixed_config_reason(chunk: str, info: ChunkInfo, base_file: Callable[[str], bytes | None] | None) -> str | None:
    names = {PurePosixPath(p).name for p in info.paths} & MIXED_CONFIG_FILES
    if not names:
        return None
    if len(info.paths) != 1:
        return f"renames or copies {'/'.join(sorted(names))}"
    path = next(iter(info.paths))
    name = PurePosixPath(path).name
    if info.new_file:
        before = ""
    elif base_file is None:
        if name == "setup.cfg" and _ini_hunks_stay_out_of_pytest(chunk):
            return None
        return f"changes {name} and its base content is unknown here"
    else:
        raw = base_file(path)
        if raw is None:
            return f"changes {name}, which the base commit lacks"
        before = raw.decode("utf-8", "surrogateescape")
    after = apply_chunk(before, chunk)
    if after is None:
        return f"its hunks do not apply exactly to the base {name}"
    if pytest_settings_changed(name, before, after):
        return f"changes pytest settings in {name}"
    return None


def filter_patch(patch: str, base_file: Callable[[str], bytes | None] | None = None) -> str:
    """The kept part of :func:`screen_patch`."""
    return screen_patch(patch, base_file).patch


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
