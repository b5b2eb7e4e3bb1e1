"""str_replace_editor semantics on the local backend."""

from __future__ import annotations

import pytest

from trace_envs.core.tools import ToolError
from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.editor import Editor


@pytest.fixture()
def editor(local_tasks):
    backend = LocalBackend()
    backend.start(next(t for t in local_tasks if t.instance_id == "local__stats-1"))
    yield Editor(backend)
    backend.close()


def test_view_file_and_directory(editor):
    out = editor("view", "stats/summary.py", view_range=[1, 3])
    assert out.splitlines()[1] == '     1\t"""Summary statistics of number lists."""' and "     4\t" not in out
    listing = editor("view", ".")
    assert "stats/summary.py" in listing and ".git" not in listing
    with pytest.raises(ToolError):
        editor("view", "stats/summary.py", view_range=[5, 2])


def test_create_str_replace_insert_undo(editor):
    assert "created" in editor("create", "stats/extra.py", file_text="A = 1\n")
    with pytest.raises(ToolError, match="already exists"):
        editor("create", "stats/extra.py", file_text="B = 2\n")
    editor("str_replace", "stats/extra.py", old_str="A = 1", new_str="A = 2")
    editor("insert", "stats/extra.py", insert_line=0, new_str="# header")
    assert editor.backend.read_file("stats/extra.py") == "# header\nA = 2\n"
    editor("undo_edit", "stats/extra.py")
    assert editor.backend.read_file("stats/extra.py") == "A = 2\n"
    editor("undo_edit", "stats/extra.py")
    editor("undo_edit", "stats/extra.py")
    assert not editor.backend.exists("stats/extra.py")
    with pytest.raises(ToolError, match="no edit history"):
        editor("undo_edit", "stats/extra.py")


def test_str_replace_needs_unique_match(editor):
    with pytest.raises(ToolError, match="occurs 2 times"):
        editor("str_replace", "stats/summary.py", old_str='raise ValueError("empty")', new_str="pass")
    with pytest.raises(ToolError, match="did not appear"):
        editor("str_replace", "stats/summary.py", old_str="no such text", new_str="x")
    with pytest.raises(ToolError, match="leaves the repository"):
        editor("view", "../../etc/passwd")
    with pytest.raises(ToolError, match="unknown command"):
        editor("delete", "stats/summary.py")


def test_edits_keep_crlf_and_refuse_files_that_are_not_utf8(editor):
    root = editor.backend._ws().root
    (root / "crlf.txt").write_bytes(b"a = 1\r\nb = 1\r\n")
    editor("str_replace", "crlf.txt", old_str="b = 1", new_str="b = 2")
    assert (root / "crlf.txt").read_bytes() == b"a = 1\r\nb = 2\r\n"
    editor("undo_edit", "crlf.txt")
    assert (root / "crlf.txt").read_bytes() == b"a = 1\r\nb = 1\r\n"
    latin = b'x = "caf\xe9"\nb = 1\n'
    (root / "latin1.py").write_bytes(latin)
    assert "caf\ufffd" in editor("view", "latin1.py")  # shown, with the undecodable byte replaced
    with pytest.raises(ToolError, match="is not UTF-8 text"):
        editor("str_replace", "latin1.py", old_str="b = 1", new_str="b = 2")
    assert (root / "latin1.py").read_bytes() == latin
    with pytest.raises(ToolError, match="outside the repository"):
        editor("create", "/tmp/notes.txt", file_text="x")
