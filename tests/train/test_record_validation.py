"""The trajectory schema is checked on read: a bad line names its file, 1-based line and field."""

import json
import re

import pytest

from trace_train.evaluation import summarize
from trace_train.trajectory import (
    RecordError,
    TrajectoryRecord,
    iter_trajectory_rows,
    read_trajectories,
    validate_record,
    write_trajectories,
)


def _row(**changes):
    row = TrajectoryRecord(env_id="trace/retail-sim-v0", seed=3, reward=0.0, success=False, termination="user_stop",
                           messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
                           token_ids=[5, 6, 7], loss_mask=[0, 1, 1], logprobs=[0.0, -0.5, -1.25]).to_dict()
    row.update(changes)
    return row


def _file(tmp_path, bad: dict | list | str):
    """Line 1 is good, line 2 is ``bad``, line 3 is good."""
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (_row(seed=1), bad, _row(seed=2))) + "\n")
    return path


def test_string_false_is_an_error_not_a_pass(tmp_path):
    rows = [_row(seed=i, success="false") for i in range(17)] + [_row(seed=99, success=True, reward=1.0)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = rf"^{re.escape(str(path))}:1: field 'success' must be a bool \(true or false\), got str 'false'"
    with pytest.raises(RecordError, match=message):
        summarize(read_trajectories(path), policy="p")


def _without(key):
    row = _row()
    del row[key]
    return row


@pytest.mark.parametrize(
    "bad, field",
    [
        (_row(success=1), "success"),
        (_row(success=None), "success"),
        (_row(seed="3"), "seed"),
        (_row(seed=True), "seed"),
        (_row(reward="1.0"), "reward"),
        (_row(reward=float("nan")), "reward"),
        (_row(env_id=""), "env_id"),
        (_row(termination=3), "termination"),
        (_row(messages={"role": "user"}), "messages"),
        (_row(messages=["hi"]), "messages"),
        (_row(messages=[{"content": "no role"}]), "messages"),
        (_row(messages=[{"role": "user", "content": 5}]), "messages"),
        (_row(reward_breakdown={"db": "1"}), "reward_breakdown"),
        (_row(info=[]), "info"),
        (_row(token_ids=[5, 6.0, 7]), "token_ids"),
        (_row(token_ids=[5, -1, 7]), "token_ids"),
        (_row(loss_mask=[0, 2, 1]), "loss_mask"),
        (_row(logprobs=[0.0, "x", 0.0]), "logprobs"),
        (_row(loss_mask=[0, 1]), "loss_mask"),
        (_row(logprobs=[0.0]), "logprobs"),
        (_row(policy=None), "policy"),
        (_row(schema_version="1"), "schema_version"),
        (_without("env_id"), "env_id"),
        (_without("success"), "success"),
        (_without("messages"), "messages"),
        (_without("reward"), "reward"),
    ],
)
def test_bad_field_names_file_line_and_field(tmp_path, bad, field):
    path = _file(tmp_path, bad)
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:2: (required )?field '{field}' ") as err:
        read_trajectories(path)
    assert isinstance(err.value, ValueError)
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:2: "):
        list(iter_trajectory_rows(path))


@pytest.mark.parametrize("bad", [[1, 2], "a string", 7])
def test_a_line_that_is_not_an_object_is_an_error(tmp_path, bad):
    path = _file(tmp_path, bad)
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:2: a trajectory record must be a JSON object"):
        read_trajectories(path)


def test_good_rows_pass_and_unknown_keys_are_allowed(tmp_path):
    path = _file(tmp_path, _row(seed=5, capability="precondition"))
    assert [r.seed for r in read_trajectories(path)] == [1, 5, 2]
    assert [r["capability"] for r in iter_trajectory_rows(path) if r["seed"] == 5] == ["precondition"]
    # optional fields may be absent or null
    minimal = {k: _row()[k] for k in ("env_id", "seed", "messages", "reward", "success", "termination")}
    assert validate_record({**minimal, "token_ids": None}) is not None


def test_a_complete_broken_last_line_is_an_error_not_a_truncation(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_row()) + "\n{broken\n")  # ends in a newline: not a crash mid-append
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:2: not valid JSON"):
        read_trajectories(path)


def test_writer_refuses_a_record_that_would_not_read_back(tmp_path):
    path = tmp_path / "t.jsonl"
    good = TrajectoryRecord.from_dict(_row())
    bad = TrajectoryRecord.from_dict(_row())
    bad.success = "yes"
    with pytest.raises(RecordError, match=r"record 1 for .*t\.jsonl: field 'success'"):
        write_trajectories(path, [good, bad])
    assert not path.exists()
