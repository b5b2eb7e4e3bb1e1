"""``trace-rl rollout`` output safety: an existing ``out`` is refused unless ``if_exists`` says otherwise,
two runs on the same ``out`` cannot both write (a lock), and counts are checked before any work.

The Hydra app runs in-process (``trace_train.cli.main`` with an argv), as in tests/grpo/test_train_command.py.
"""

import fcntl
import json
import os

import pytest

from tests.cli_runner import run_cli
from trace_train.trajectory import read_trajectories


def _rollout(*overrides, tmp_path, capsys):
    """Run ``trace-rl rollout`` (oracle on retail-sim); returns (exit code, stdout, stderr)."""
    return run_cli("rollout", *overrides, hydra_dir=f"{tmp_path}/hydra", capsys=capsys)


def test_second_run_fails_at_once_while_the_first_holds_the_lock(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    lock = out.with_name("t.jsonl.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first writer, mid-run
        os.write(fd, b"4242\n")
        code, _, err = _rollout("episodes=2", f"out={out}", tmp_path=tmp_path, capsys=capsys)
        assert code == 2
        assert "is being written by pid 4242" in err and str(lock) in err
        assert not out.exists()
    finally:
        os.close(fd)
    code, _, err = _rollout("episodes=2", f"out={out}", tmp_path=tmp_path, capsys=capsys)  # lock released
    assert code == 0, err
    assert [r.seed for r in read_trajectories(out)] == [0, 1]


def test_existing_out_is_refused_unless_append_or_overwrite(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    code, _, err = _rollout("episodes=3", f"out={out}", tmp_path=tmp_path, capsys=capsys)
    assert code == 0, err
    first = out.read_bytes()
    code, _, err = _rollout("episodes=2", f"out={out}", tmp_path=tmp_path, capsys=capsys)
    assert code == 2 and "already exists" in err and "if_exists=append" in err
    assert len(err.strip().splitlines()) == 1
    assert out.read_bytes() == first  # nothing lost

    code, stdout, err = _rollout("episodes=2", "offset=3", "if_exists=append", f"out={out}", tmp_path=tmp_path,
                                 capsys=capsys)
    assert code == 0, err
    assert "appended to 3" in stdout
    assert out.read_bytes().startswith(first)  # the old lines byte for byte, then the new ones
    assert [r.seed for r in read_trajectories(out)] == [0, 1, 2, 3, 4]

    code, _, err = _rollout("episodes=1", "offset=7", "if_exists=overwrite", f"out={out}", tmp_path=tmp_path,
                            capsys=capsys)
    assert code == 0, err
    assert [r.seed for r in read_trajectories(out)] == [7]


def test_append_refuses_a_file_with_a_bad_record(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    code, _, err = _rollout("episodes=2", f"out={out}", tmp_path=tmp_path, capsys=capsys)
    assert code == 0, err
    lines = out.read_text().splitlines()
    row = json.loads(lines[1])
    row["success"] = "false"
    out.write_text(lines[0] + "\n" + json.dumps(row) + "\n")
    before = out.read_bytes()
    code, _, err = _rollout("episodes=1", "offset=2", "if_exists=append", f"out={out}", tmp_path=tmp_path,
                            capsys=capsys)
    assert code == 2
    assert f"{out}:2: field 'success' must be a bool" in err
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "override, message",
    [
        ("episodes=-5", "episodes must be >= 1, got -5; set episodes=<integer >= 1>"),
        ("episodes=0", "episodes must be >= 1, got 0"),
        ("episodes=abc", "episodes must be an integer >= 1, got 'abc'"),
        ("episodes=2.5", "episodes must be an integer >= 1, got 2.5"),
        ("offset=-1", "offset must be >= 0, got -1"),
        ("group_size=0", "group_size must be >= 1, got 0"),
        ("batch_episodes=0", "batch_episodes must be >= 1, got 0"),
        ("if_exists=sometimes", "if_exists must be one of error, append, overwrite"),
        ("offset=999999", "split 'train' holds 1000000 seeds; episodes=100 from offset=999999 goes past its end"),
    ],
)
def test_counts_are_checked_before_any_model_loads(tmp_path, capsys, override, message):
    # The model does not exist: reaching the backend would fail differently (and much later).
    code, _, err = _rollout(override, "policy.kind=hf", "+policy.model=/nonexistent", f"out={tmp_path}/t.jsonl",
                            tmp_path=tmp_path, capsys=capsys)
    assert code == 2
    assert err.strip() == f"trace-rl rollout: {message}" or err.strip().startswith(f"trace-rl rollout: {message}")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "t.jsonl.lock").exists()


def test_counts_are_checked_before_the_env_id(tmp_path, capsys):
    code, _, err = _rollout("episodes=-5", "env=trace/nope-v0", f"out={tmp_path}/t.jsonl", tmp_path=tmp_path,
                            capsys=capsys)
    assert code == 2 and "episodes must be >= 1" in err and "unknown env id" not in err


def _eval(*overrides, tmp_path, capsys):
    code, _, err = run_cli("eval", *overrides, hydra_dir=f"{tmp_path}/hydra", capsys=capsys)
    return code, err


@pytest.mark.parametrize(
    "override, message",
    [
        ("episodes=-5", "episodes must be >= 1, got -5"),
        ("trials=0", "trials must be >= 1, got 0"),
        ("batch_episodes=x", "batch_episodes must be an integer >= 1, got 'x'"),
        ("episodes=200000", "split 'test' holds 100000 seeds; episodes=200000 goes past its end; lower episodes="),
    ],
)
def test_eval_counts_are_checked_before_any_model_loads(tmp_path, capsys, override, message):
    # The default policy is an hf model; point it nowhere so any load would fail differently.
    code, err = _eval(override, "policies.base.model=/nonexistent", tmp_path=tmp_path, capsys=capsys)
    assert code == 2
    assert err.strip().startswith(f"trace-rl eval: {message}") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "hydra" / "eval.json").exists()
