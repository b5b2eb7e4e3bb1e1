"""Manifest rows register the env that was calibrated: a later manifest's knobs replace an earlier registration
(said in the log), a row may not take a family's own id or another env's, damaged manifests and selected files are
one-line errors naming them, concurrent emitters keep every row, a broken reward stops calibration."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import generated_envs
import trace_envs  # noqa: F401
from trace_envs.synthesis import SynthesisConfig, read_selected
from trace_envs.synthesis.calibrate import calibrate_env
from trace_envs.synthesis.emit import write_manifest_entry

REPO = Path(__file__).resolve().parents[2]


def _row(env_id: str, **knobs) -> dict:
    return {"env_id": env_id, "family": "precondition_verification", "capability": "precondition_verification",
            "domain": "retail-sim", "knobs": knobs}


def _manifest(folder: Path, *rows: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"envs": list(rows)}))
    return folder


def test_a_later_manifest_replaces_the_knobs_an_earlier_one_registered(tmp_path):
    env_id = "trace/precondition_verification-rowtest-v0"
    try:
        assert generated_envs.load(_manifest(tmp_path / "a", _row(env_id, refuse_fraction=0.5))) == [env_id]
        assert generated_envs.load(_manifest(tmp_path / "b", _row(env_id, refuse_fraction=0.9))) == [env_id]
        assert gym.spec(env_id).kwargs == {"domain": "retail-sim", "refuse_fraction": 0.9}
    finally:
        gym.registry.pop(env_id, None)


def test_a_row_may_not_take_a_familys_id_or_another_envs(tmp_path):
    family_id = "trace/structured_data_reasoning-v0"
    before = gym.spec(family_id)
    assert generated_envs.load(_manifest(tmp_path / "c", _row(family_id, refuse_fraction=0.9))) == []
    assert gym.spec(family_id) == before
    assert generated_envs.load(_manifest(tmp_path / "d", _row("trace/retail-sim-v0", refuse_fraction=0.9))) == []
    assert gym.spec("trace/retail-sim-v0").entry_point.endswith("RetailSimEnv")


@pytest.mark.parametrize("content", [b'{"envs": [', b'\xff\xfe', b"[1, 2]", b'{"envs": [3]}'])
def test_a_damaged_manifest_is_named_and_not_overwritten(tmp_path, content):
    (tmp_path / "manifest.json").write_bytes(content)
    with pytest.raises(ValueError, match="manifest.json"):
        write_manifest_entry(tmp_path, _row("trace/precondition_verification-dmg-v0"))
    assert (tmp_path / "manifest.json").read_bytes() == content
    assert generated_envs.load(tmp_path) == []  # on import: a warning, nothing registered


@pytest.mark.parametrize("content,message", [
    ('{"selected": [', "not valid JSON"),
    ('{"capabilities": []}', "expected {\"selected\": [...]}"),
    ('{"selected": [3]}', "needs a string 'name'"),
])
def test_a_damaged_selected_file_is_named(tmp_path, content, message):
    path = tmp_path / "selected.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"selected.json: .*{re.escape(message)}"):
        read_selected(path)


def _emit_rows(args):
    folder, start = args
    for i in range(start, start + 20):
        write_manifest_entry(Path(folder), {"env_id": f"trace/precondition_verification-race{i}-v0", "family":
                                            "precondition_verification", "domain": "retail-sim", "knobs": {}})


def test_two_emitters_into_one_directory_keep_every_row(tmp_path):
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_emit_rows, [(str(tmp_path), 0), (str(tmp_path), 100)])
    rows = json.loads((tmp_path / "manifest.json").read_text())["envs"]
    assert len(rows) == 40 and len({r["env_id"] for r in rows}) == 40


def test_a_non_finite_reward_stops_calibration():
    cfg = SynthesisConfig.from_dict(yaml.safe_load((REPO / "conf" / "synthesis" / "default.yaml").read_text()))

    def collector(env_id, kwargs, seeds, group_size, **_):
        rewards = np.zeros((len(seeds), group_size))
        rewards[0, 1] = float("nan")
        return rewards, rewards > 0

    with pytest.raises(ValueError, match="non-finite rewards"):
        calibrate_env("trace/precondition_verification-v0", {}, collector, cfg)
