"""Trajectory files: a last line cut inside a multi-byte character is skipped like any truncated last line, and
``compact_text`` reads list (OpenAI content-part) message content, which the schema accepts."""

from __future__ import annotations

import pytest

from trace_envs.records import (
    ReadReport,
    TrajectoryRecord,
    append_jsonl,
    compact_text,
    iter_jsonl,
    read_trajectories,
    write_trajectories,
)


def test_a_last_line_cut_inside_a_utf8_character_is_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    append_jsonl(path, {"i": 0, "env_id": "ok"})
    append_jsonl(path, {"i": 1, "env_id": "café-env"})
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex("é".encode()) + 1])  # the crash lands between the two bytes of é
    report = ReadReport()
    assert list(iter_jsonl(path, report)) == [{"i": 0, "env_id": "ok"}]
    assert report.truncated_last_line and report.rows == 1
    append_jsonl(path, {"i": 2})  # an append after it drops the cut line first
    assert [row["i"] for row in iter_jsonl(path)] == [0, 2]


def test_bad_utf8_inside_the_file_names_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"i": 0}\n{"i": "\xc3"}\n{"i": 2}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not valid UTF-8"):
        list(iter_jsonl(path))


def test_compact_text_joins_list_content(tmp_path):
    rec = TrajectoryRecord(env_id="e", seed=0, reward=0.0, success=False, termination="x", messages=[
        {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "image_url", "image_url": {}},
                                     {"type": "text", "text": "there"}]},
        {"role": "tool", "content": [{"type": "text", "text": "x" * 500}]},
    ])
    write_trajectories(tmp_path / "t.jsonl", [rec])
    (back,) = read_trajectories(tmp_path / "t.jsonl")
    lines = compact_text(back, max_tool_chars=10).splitlines()
    assert lines[1] == "user: hi <image_url>there"
    assert lines[2] == "tool: " + "x" * 10 + " …"
