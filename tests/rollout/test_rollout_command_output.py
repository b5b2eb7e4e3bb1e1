"""``trace-rl rollout`` writes each finished batch as it completes: a run that fails keeps its episodes in
``<out>.partial`` and ``resume=true`` plays only the rest; an invalid record is left out on its own; server and
load failures are one-line errors (exit 2). The command runs in-process on the oracle; ``build_backend`` is
wrapped to make the backend fail or score NaN (the real backend plays every episode it is asked for)."""

from __future__ import annotations

import json

import pytest

import trace_train.policies as policies
from tests.cli_runner import run_cli
from trace_train.model import PolicyLoadError
from trace_train.rollout.openai_backend import RolloutServerError
from trace_train.trajectory import read_trajectories

REAL_BUILD = policies.build_backend


class _Flaky:
    """The real backend, failing from batch ``fail_at`` on and scoring NaN on ``nan_seed``; logs what it played."""

    def __init__(self, inner, fail_at: int | None, nan_seed: int | None, played: list[int]) -> None:
        self.inner, self.fail_at, self.nan_seed, self.played, self.calls = inner, fail_at, nan_seed, played, 0

    def rollout(self, requests, sampling, adapter=None):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RolloutServerError("POST http://127.0.0.1:1/v1/completions: HTTP 500: engine dead",
                                     "http://127.0.0.1:1/v1/completions")
        records = self.inner.rollout(requests, sampling, adapter)
        self.played.extend(r.seed for r in records)
        for r in records:
            if r.seed == self.nan_seed:
                r.reward = float("nan")
        return records


def _backend(monkeypatch, fail_at=None, nan_seed=None) -> list[int]:
    played: list[int] = []

    def build(spec):
        backend, adapter = REAL_BUILD(spec)
        return _Flaky(backend, fail_at, nan_seed, played), adapter

    monkeypatch.setattr(policies, "build_backend", build)
    return played


def _rollout(tmp_path, capsys, *overrides):
    code, out, err = run_cli("rollout", *overrides, hydra_dir=f"{tmp_path}/hydra", capsys=capsys)
    return code, out, err


def _seeds(path):
    return [r.seed for r in read_trajectories(path)]


def test_a_failed_run_keeps_its_episodes_and_resume_plays_only_the_rest(tmp_path, capsys, monkeypatch):
    out = tmp_path / "t.jsonl"
    partial, settings = tmp_path / "t.jsonl.partial", tmp_path / "t.jsonl.partial.json"
    args = ["episodes=6", "batch_episodes=2", f"out={out}"]
    _backend(monkeypatch, fail_at=3)
    code, _, err = _rollout(tmp_path, capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "engine dead" in err and f"4 finished episodes are kept in {partial}" in err and "resume=true" in err
    assert not out.exists() and _seeds(partial) == [0, 1, 2, 3] and settings.exists()

    code, _, err = _rollout(tmp_path, capsys, *args)  # the partial file is never silently replaced
    assert code == 2 and "interrupted run" in err and "resume=true" in err
    code, _, err = _rollout(tmp_path, capsys, *args[1:], "episodes=7", "resume=true")
    assert code == 2 and "episodes: was 6, now 7" in err
    assert _seeds(partial) == [0, 1, 2, 3]

    played = _backend(monkeypatch)
    code, stdout, err = _rollout(tmp_path, capsys, "episodes=6", "batch_episodes=3", f"out={out}",
                                 "resume=true")  # the batch size may change
    assert code == 0, err
    assert played == [4, 5] and "6 episodes" in stdout
    assert not partial.exists() and not settings.exists()
    resumed = [r.to_dict() for r in read_trajectories(out)]

    whole = tmp_path / "whole.jsonl"  # the same records as a run that never failed
    assert _rollout(tmp_path, capsys, "episodes=6", f"out={whole}")[0] == 0
    assert resumed == [r.to_dict() for r in read_trajectories(whole)]


def test_resume_of_an_append_adds_after_the_old_bytes(tmp_path, capsys, monkeypatch):
    out = tmp_path / "t.jsonl"
    assert _rollout(tmp_path, capsys, "episodes=2", f"out={out}")[0] == 0
    first = out.read_bytes()
    args = ["episodes=4", "offset=2", "batch_episodes=2", "if_exists=append", f"out={out}"]
    _backend(monkeypatch, fail_at=2)
    assert _rollout(tmp_path, capsys, *args)[0] == 2
    assert out.read_bytes() == first  # untouched until the run completes
    played = _backend(monkeypatch)
    code, stdout, err = _rollout(tmp_path, capsys, *args, "resume=true")
    assert code == 0, err
    assert played == [4, 5] and "appended to 2" in stdout
    assert out.read_bytes().startswith(first) and _seeds(out) == [0, 1, 2, 3, 4, 5]


def test_an_invalid_record_is_left_out_on_its_own(tmp_path, capsys, monkeypatch):
    out = tmp_path / "t.jsonl"
    _backend(monkeypatch, nan_seed=3)
    code, _, err = _rollout(tmp_path, capsys, "episodes=6", "batch_episodes=2", f"out={out}")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "1 of 6 episodes were not written" in err and "field 'reward' must be a finite number" in err
    assert "trace/retail-sim-v0|3|" in err
    assert _seeds(out) == [0, 1, 2, 4, 5]
    assert not (tmp_path / "t.jsonl.partial").exists()


@pytest.mark.parametrize("error", [
    RolloutServerError("GET http://127.0.0.1:9/v1/models: ConnectionRefusedError: refused", "http://127.0.0.1:9"),
    PolicyLoadError("could not load the tokenizer of 'nowhere': not found"),
])
def test_server_and_load_failures_are_one_line_errors(tmp_path, capsys, monkeypatch, error):
    def build(spec):
        raise error

    monkeypatch.setattr(policies, "build_backend", build)
    code, _, err = _rollout(tmp_path, capsys, "episodes=1", f"out={tmp_path}/t.jsonl")
    assert code == 2 and err.strip() == f"trace-rl rollout: {error}"


def test_resume_must_be_a_bool(tmp_path, capsys):
    code, _, err = _rollout(tmp_path, capsys, "episodes=1", "resume=maybe", f"out={tmp_path}/t.jsonl")
    assert code == 2 and "resume must be true or false, got 'maybe'" in err


def test_settings_are_recorded_beside_the_partial_file(tmp_path, capsys, monkeypatch):
    _backend(monkeypatch, fail_at=2)
    assert _rollout(tmp_path, capsys, "episodes=2", "batch_episodes=1", f"out={tmp_path}/t.jsonl")[0] == 2
    settings = json.loads((tmp_path / "t.jsonl.partial.json").read_text())
    assert settings["env"] == "trace/retail-sim-v0" and settings["episodes"] == 2 and "batch_episodes" not in settings
    assert settings["policy"]["kind"] == "oracle" and "base_urls" not in settings["policy"]
