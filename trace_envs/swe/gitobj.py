"""Pure-Python git helpers for generated trees: the base commit hash and ``git diff``-style patches.

Generating a task must be cheap (a reset of the code-localization env generates one), so instead of
running git a dozen times we compute the commit id git would give a tree committed with the fixed
identity of ``host_git.GIT_IDENTITY`` (``sandbox.materialize`` cross-checks it against real git) and
render patches with ``difflib`` in the format ``git apply`` reads.
"""

from __future__ import annotations

import difflib
import hashlib

_AUTHOR = "trace-rl <trace-rl@localhost> 946684800 +0000"  # matches host_git.GIT_IDENTITY
_MESSAGE = "base\n"


def _object(kind: str, body: bytes) -> bytes:
    return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body).digest()  # noqa: S324 - git's object id


def _tree(files: dict[str, bytes]) -> bytes:
    entries: dict[str, tuple[str, bytes]] = {}
    subdirs: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        head, _, rest = path.partition("/")
        if rest:
            subdirs.setdefault(head, {})[rest] = data
        else:
            entries[head] = ("100644", _object("blob", data))
    for name, sub in subdirs.items():
        entries[name] = ("40000", _tree(sub))
    # git sorts tree entries by name, directories compared as if they ended in "/"
    order = sorted(entries, key=lambda n: n + "/" if entries[n][0] == "40000" else n)
    body = b"".join(f"{entries[n][0]} {n}\0".encode() + entries[n][1] for n in order)
    return _object("tree", body)


def commit_hash(files: dict[str, str]) -> str:
    """The id of the single commit ``host_git.init_repo`` makes of ``files`` (all mode 100644)."""
    tree = _tree({p: t.encode() for p, t in files.items()}).hex()
    body = f"tree {tree}\nauthor {_AUTHOR}\ncommitter {_AUTHOR}\n\n{_MESSAGE}".encode()
    return _object("commit", body).hex()


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def make_patch(base: dict[str, str], changed: dict[str, str]) -> str:
    """A ``git apply``-able patch turning ``base`` into ``base`` updated with ``changed`` (sorted by path)."""
    out = []
    for path in sorted(changed):
        old, new = base.get(path), changed[path]
        if old == new:
            continue
        if not new and old is None:
            raise ValueError(f"cannot express the new empty file {path} as a text patch")
        head = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
        body = difflib.unified_diff(_lines(old or ""), _lines(new), "/dev/null" if old is None else f"a/{path}",
                                    f"b/{path}")
        out.append(head + "".join(body))
    return "".join(out)
