import json

import pytest

from trace_train.trajectory import (
    ReadReport,
    TrajectoryRecord,
    append_jsonl,
    compact_text,
    read_trajectories,
    write_trajectories,
)


def _record(seed: int, success: bool = True) -> TrajectoryRecord:
    return TrajectoryRecord(env_id="trace/retail-sim-v0", seed=seed, reward=float(success), success=success,
                            termination="user_stop", policy="p",
                            messages=[{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "",
                                       "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
                                      {"role": "tool", "name": "f", "content": "x" * 500}])


def test_round_trip_and_atomic_write(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [_record(1), _record(2, False)])
    back = read_trajectories(path)
    assert [r.seed for r in back] == [1, 2] and back[1].success is False
    assert back[0].schema_version == 1
    assert not list(tmp_path.glob(".t.jsonl.*"))  # no temp file left behind


def test_truncated_last_line_is_reported_and_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [_record(1)])
    append_jsonl(path, _record(2).to_dict())
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a crash mid-append
    report = ReadReport()
    back = read_trajectories(path, report)
    assert [r.seed for r in back] == [1] and report.truncated_last_line and report.rows == 1


def test_broken_inner_line_raises(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("{broken\n" + json.dumps(_record(1).to_dict()) + "\n")
    with pytest.raises(ValueError, match=":1:"):
        read_trajectories(path)


def test_newer_schema_is_refused():
    data = _record(1).to_dict()
    data["schema_version"] = 99
    with pytest.raises(ValueError, match="newer"):
        TrajectoryRecord.from_dict(data)


def test_compact_text_clips_tool_output():
    text = compact_text(_record(3), max_tool_chars=50)
    assert "<call f({})>" in text and "x" * 51 not in text and text.startswith("[trajectory")


def test_lone_surrogate_is_written_and_read_back(tmp_path):
    """A Python str UTF-8 cannot encode (a lone surrogate from a tool's output) must not fail the writer."""
    from trace_train.trajectory import iter_jsonl, write_json_atomic

    text = "bad \ud800 byte, café"
    record = _record(1)
    record.messages.append({"role": "tool", "name": "f", "content": text})
    plain = _record(2)
    plain.messages.append({"role": "user", "content": "café"})
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [record, plain])
    append_jsonl(path, {**_record(3).to_dict(), "info": {"note": "\udfff"}})
    back = read_trajectories(path)
    assert back[0].messages[-1]["content"] == text and back[2].info == {"note": "\udfff"}
    lines = path.read_text(encoding="utf-8").splitlines()
    assert "\\ud800" in lines[0]  # escaped on the one line that needs it
    assert "café" in lines[1] and "\\u" not in lines[1]  # other lines keep non-ASCII readable
    write_json_atomic(tmp_path / "doc.json", {"text": text})
    assert json.loads((tmp_path / "doc.json").read_text(encoding="utf-8")) == {"text": text}
    assert list(iter_jsonl(path))[0]["messages"][-1]["content"] == text


def test_append_after_a_crash_mid_append_keeps_the_file_readable(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [_record(1)])
    append_jsonl(path, _record(2).to_dict())
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a crash mid-append of record 2
    append_jsonl(path, _record(3).to_dict())  # the resumed writer goes on
    report = ReadReport()
    assert [r.seed for r in read_trajectories(path, report)] == [1, 3]
    assert not report.truncated_last_line and report.rows == 2


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0b", "\x1c"])
def test_line_separators_inside_text_keep_the_file_readable(tmp_path, separator):
    """Model text and tool output can hold characters ``str.splitlines`` breaks at; written raw (non-ASCII stays
    readable), they must not cut a record in two when read back, streamed, appended to or counted."""
    from trace_train.trajectory import iter_jsonl

    text = f"ok{separator}x"
    record = _record(1)
    record.messages.append({"role": "assistant", "content": text})
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [record, _record(2)])
    append_jsonl(path, _record(3).to_dict())
    assert path.read_text(encoding="utf-8").count("\n") == 3
    back = read_trajectories(path)
    assert [r.seed for r in back] == [1, 2, 3] and back[0].messages[-1]["content"] == text
    assert [row["seed"] for row in iter_jsonl(path)] == [1, 2, 3]


def test_swe_task_file_with_a_line_separator_in_a_problem_statement(tmp_path):
    from trace_envs.swe.task import load_jsonl

    rows = [{"instance_id": f"o__r-{i}", "repo": "o/r", "base_commit": "abc", "problem_statement": f"bug{sep}here",
             "patch": "", "test_patch": "", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]", "version": "1"}
            for i, sep in enumerate(["\u2028", "\x85"])]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tasks = load_jsonl(path)
    assert [t.problem_statement for t in tasks] == ["bug\u2028here", "bug\x85here"]
