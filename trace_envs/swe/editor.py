"""``str_replace_editor``: view / create / str_replace / insert / undo_edit over a backend's files.

Semantics follow Anthropic's text editor tool: ``view`` shows ``cat -n`` numbered lines (optionally a
``[start, end]`` range, ``end = -1`` for the end of file) or a directory listing; ``create`` refuses to
overwrite; ``str_replace`` needs ``old_str`` to occur exactly once; ``insert`` puts ``new_str`` after
line ``insert_line`` (0 = top); ``undo_edit`` reverts the last edit of that file. Paths are relative to
the repository root (``/testbed/...`` is accepted too); a path that resolves (symlinks followed) outside
the repository is refused, for reading and writing alike. Errors raise ``ToolError``.

The editor runs on the host, outside the sandbox's memory limit: it refuses files over ``MAX_EDIT_BYTES``
(bash's ``sed``/``grep`` work on those), numbers only the lines it shows, and caps every observation, error
messages included, at the sandbox's ``max_output_chars`` (as bash output is capped).
"""

from __future__ import annotations

import shlex
from typing import Any

from trace_envs.core.tools import ToolError
from trace_envs.swe.backends import Backend, repo_relative
from trace_envs.swe.sandbox import SandboxLimits, truncate_output

SNIPPET_CONTEXT = 4
MAX_VIEW_CHARS = 16_000  # upper bound of one view; the observation cap (max_output_chars) may be lower
MAX_EDIT_BYTES = 2_000_000
MAX_LISTED_MATCHES = 20
CLIPPED = "\n<response clipped; use view_range to see the rest>"


def numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(text.split("\n"), start))


def numbered_range(text: str, start: int, end: int, budget: int) -> str:
    """Lines ``start..end`` (1-based, inclusive) of ``text`` numbered like ``cat -n``, clipped at ``budget`` chars;
    only the lines shown are split out and numbered."""
    pos = 0
    for _ in range(start - 1):
        pos = text.index("\n", pos) + 1
    out: list[str] = []
    size = 0
    for number in range(start, end + 1):
        stop = text.find("\n", pos)
        line = text[pos:] if stop < 0 else text[pos:stop]
        entry = f"{number:6d}\t{line}"
        if size + len(entry) + 1 > budget:
            out.append(entry[:max(0, budget - size)])
            return "\n".join(out) + CLIPPED
        out.append(entry)
        size += len(entry) + 1
        if stop < 0:
            break
        pos = stop + 1
    return "\n".join(out)


class Editor:
    """The editor state of one episode (the undo history lives here)."""

    def __init__(self, backend: Backend, max_chars: int | None = None):
        self.backend = backend
        self.history: dict[str, list[str]] = {}
        limits = getattr(backend, "limits", None)
        self.max_chars = max_chars or (limits.max_output_chars if isinstance(limits, SandboxLimits)
                                       else SandboxLimits().max_output_chars)

    def __call__(self, command: str, path: str, file_text: str | None = None, old_str: str | None = None,
                 new_str: str | None = None, insert_line: int | None = None,
                 view_range: list[int] | None = None) -> str:
        try:
            rel = repo_relative(path)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        handlers = {"view": lambda: self.view(rel, view_range), "create": lambda: self.create(rel, file_text),
                    "str_replace": lambda: self.str_replace(rel, old_str, new_str),
                    "insert": lambda: self.insert(rel, insert_line, new_str), "undo_edit": lambda: self.undo(rel)}
        if command not in handlers:
            raise ToolError(truncate_output(f"unknown command {command!r}; use one of {', '.join(handlers)}",
                                            self.max_chars))
        try:
            return truncate_output(handlers[command](), self.max_chars)
        except ToolError as exc:
            raise ToolError(truncate_output(str(exc), self.max_chars)) from None
        except (ValueError, OSError) as exc:  # e.g. a path that resolves outside the repository
            raise ToolError(truncate_output(str(exc), self.max_chars)) from None

    def _read(self, rel: str) -> str:
        if not rel or not self.backend.exists(rel):
            raise ToolError(f"the path {rel or '.'} does not exist")
        if self.backend.is_dir(rel):
            raise ToolError(f"{rel} is a directory; only `view` works on directories")
        size = self.backend.file_size(rel)
        if size > MAX_EDIT_BYTES:
            raise ToolError(f"{rel} is {size} bytes; the editor handles files up to {MAX_EDIT_BYTES} bytes: read or "
                            "edit it with bash (e.g. `sed -n '100,200p'`, `grep -n`, `sed -i`)")
        return self.backend.read_file(rel)

    def _write(self, rel: str, new: str, old: str | None) -> None:
        self.history.setdefault(rel, []).append(old if old is not None else "\x00<absent>")
        self.backend.write_file(rel, new)

    def view(self, rel: str, view_range: list[int] | None) -> str:
        if self.backend.is_dir(rel):
            if view_range is not None:
                raise ToolError("view_range is not allowed for a directory")
            listing = self.backend.list_dir(rel, depth=2)
            return f"Files and directories in {rel or '.'} (2 levels, hidden items excluded):\n" + "\n".join(listing)
        if view_range is not None and (len(view_range) != 2 or not all(isinstance(v, int)
                                                                        and not isinstance(v, bool)
                                                                        for v in view_range)):
            raise ToolError("view_range must be two integers [start, end]")
        text = self._read(rel)
        n_lines = text.count("\n") + 1
        start, end = 1, n_lines
        if view_range is not None:
            start, end = view_range
            end = n_lines if end == -1 else end
            if not 1 <= start <= n_lines or end < start or end > n_lines:
                raise ToolError(f"invalid view_range {view_range}; the file has {n_lines} lines")
        head = f"Here's the result of running `cat -n` on {rel}:\n"
        budget = min(MAX_VIEW_CHARS, self.max_chars - len(head) - len(CLIPPED))
        return head + numbered_range(text, start, end, budget)

    def create(self, rel: str, file_text: str | None) -> str:
        if file_text is None:
            raise ToolError("`file_text` is required for create")
        if not rel:
            raise ToolError("create needs a file path")
        if self.backend.exists(rel):
            raise ToolError(f"{rel} already exists; use str_replace to edit it")
        self._write(rel, file_text, None)
        return f"File created successfully at: {rel}"

    def str_replace(self, rel: str, old_str: str | None, new_str: str | None) -> str:
        if old_str is None:
            raise ToolError("`old_str` is required for str_replace")
        if old_str == "":
            raise ToolError("`old_str` must not be empty")
        text = self._read(rel)
        count = text.count(old_str)
        if count == 0:
            raise ToolError(f"no replacement was performed: old_str did not appear verbatim in {rel}")
        if count > 1:
            first = old_str.split("\n")[0]
            lines = [i + 1 for i, line in enumerate(text.split("\n")) if first in line]
            shown = ", ".join(map(str, lines[:MAX_LISTED_MATCHES]))
            more = f", ... {len(lines) - MAX_LISTED_MATCHES} more" if len(lines) > MAX_LISTED_MATCHES else ""
            raise ToolError(f"no replacement was performed: old_str occurs {count} times (lines {shown}{more}); "
                            "make it unique")
        new = text.replace(old_str, new_str or "")
        self._write(rel, new, text)
        line = text.split(old_str)[0].count("\n")
        return self._snippet(rel, new, line, (new_str or "").count("\n"))

    def insert(self, rel: str, insert_line: int | None, new_str: str | None) -> str:
        if insert_line is None or new_str is None:
            raise ToolError("`insert_line` and `new_str` are required for insert")
        text = self._read(rel)
        lines = text.split("\n")
        if not 0 <= insert_line <= len(lines):
            raise ToolError(f"insert_line {insert_line} is outside [0, {len(lines)}]")
        new = "\n".join(lines[:insert_line] + new_str.split("\n") + lines[insert_line:])
        self._write(rel, new, text)
        return self._snippet(rel, new, insert_line, new_str.count("\n"))

    def undo(self, rel: str) -> str:
        stack = self.history.get(rel)
        if not stack:
            raise ToolError(f"no edit history for {rel}")
        previous = stack.pop()
        if previous == "\x00<absent>":
            self.backend.run(f"rm -f -- {shlex.quote(rel)}")
            return f"Undid the creation of {rel}"
        self.backend.write_file(rel, previous)
        return f"Last edit to {rel} undone successfully.\n" + self._snippet(rel, previous, 0, -1, header=False)

    def _snippet(self, rel: str, text: str, line0: int, extra: int, header: bool = True) -> str:
        lines = text.split("\n")
        if extra < 0:
            lo, hi = 0, min(len(lines), 40)
        else:
            lo, hi = max(0, line0 - SNIPPET_CONTEXT), min(len(lines), line0 + extra + SNIPPET_CONTEXT + 1)
        snip = numbered("\n".join(lines[lo:hi]), lo + 1)
        head = f"The file {rel} has been edited. Here's the result of running `cat -n` on a snippet:\n"
        head = head if header else ""
        return head + snip


def editor_parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                        "description": "The operation."},
            "path": {"type": "string", "description": "File or directory, relative to the repository root."},
            "file_text": {"type": "string", "description": "create: the content of the new file."},
            "old_str": {"type": "string", "description": "str_replace: the exact text to replace (unique)."},
            "new_str": {"type": "string", "description": "str_replace / insert: the new text."},
            "insert_line": {"type": "integer", "description": "insert: insert after this line (0 = top)."},
            "view_range": {"type": "array", "items": {"type": "integer"},
                           "description": "view: [start, end] lines, end = -1 for end of file."},
        },
        "required": ["command", "path"],
    }
