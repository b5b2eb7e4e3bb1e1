"""``trace-rl calibrate search=true`` honours ``env_kwargs``: each candidate is played with them beside its knobs,
they are checked as without search, recorded in calibration.json, and one the search sets itself is refused."""

from __future__ import annotations

import json

from tests.cli_runner import run_cli

SEARCH = ("search=true", "synthesis.n_seeds=4", "synthesis.group_size=2", "synthesis.search.max_trials=1")


def test_search_plays_every_candidate_with_the_env_kwargs(tmp_path, capsys):
    code, _, _ = run_cli("calibrate", *SEARCH, "+env_kwargs.max_steps=1", f"out={tmp_path / 'o'}",
                         hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 1  # one step is too few for any episode: the gate is missed
    doc = json.loads((tmp_path / "o" / "calibration.json").read_text())
    assert doc["env_kwargs"] == {"max_steps": 1}
    assert [t["stats"]["mean_reward"] for t in doc["trials"]] == [0.0]


def test_search_refuses_env_kwargs_the_env_does_not_take_or_the_search_sets(tmp_path, capsys):
    for i, (kwarg, says) in enumerate([("bogus_key=1", "does not fit env"),
                                       ("refuse_fraction=0.8", "the search sets")]):
        code, _, err = run_cli("calibrate", *SEARCH, f"+env_kwargs.{kwarg}", f"out={tmp_path / f'o{i}'}",
                               hydra_dir=tmp_path / f"h{i}", capsys=capsys)
        assert code == 2 and says in err, err
        assert not (tmp_path / f"o{i}").exists()
