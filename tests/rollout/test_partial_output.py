"""``PartialOutput``: a resume after a kill mid-append keeps the complete records only, and refuses a partial file
whose settings are missing."""

from __future__ import annotations

import pytest

from trace_envs.records import TrajectoryRecord, read_trajectories
from trace_train.rollout.partial_output import PartialOutput, episode_key


def _rec(seed: int, env: str = "e/x-v0") -> TrajectoryRecord:
    return TrajectoryRecord(env_id=env, seed=seed, messages=[{"role": "user", "content": "café"}], reward=1.0,
                            success=True, termination="done", info={"sample_seed": 7})


def test_resume_after_a_cut_mid_append_keeps_the_complete_records(tmp_path):
    out = tmp_path / "t.jsonl"
    first = PartialOutput(out, {"episodes": 3})
    assert first.start(resume=False) == []
    first.append([_rec(0), _rec(1)])
    data = first.partial.read_bytes()
    first.partial.write_bytes(data[: data.rindex("é".encode()) + 1])  # killed inside the last character
    again = PartialOutput(out, {"episodes": 3})
    done = again.start(resume=True)
    assert [episode_key(r) for r in done] == [("e/x-v0", 0, 7)] and again.written == 1
    again.append([_rec(1), _rec(2)])
    assert again.finish(append=False) == out
    assert not again.partial.exists() and not again.settings_path.exists()  # the side files are gone
    assert [r.seed for r in read_trajectories(out)] == [0, 1, 2]


def test_a_partial_file_without_its_settings_is_refused(tmp_path):
    out = tmp_path / "t.jsonl"
    first = PartialOutput(out, {"episodes": 3})
    first.start(resume=False)
    first.append([_rec(0)])
    first.settings_path.unlink()
    with pytest.raises(ValueError, match="settings of the interrupted run .* cannot be read"):
        PartialOutput(out, {"episodes": 3}).start(resume=True)
