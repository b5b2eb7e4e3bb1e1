"""Calibration statistics, the gate, the knob search and emission round trips."""

import json
import subprocess
import sys
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import yaml

import trace_envs  # noqa: F401
from trace_envs.families import FAMILIES
from trace_envs.synthesis import (
    CalibrationGate,
    SynthesisConfig,
    gate_failures,
    group_statistics,
    pass_at_k,
    read_selected,
    search_knobs,
    synthesize,
)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_YAML = REPO / "conf" / "synthesis" / "default.yaml"


@pytest.fixture(scope="module")
def cfg():
    return SynthesisConfig.from_dict(yaml.safe_load(DEFAULT_YAML.read_text()))


def test_yaml_mirrors_dataclass_defaults(cfg):
    assert cfg.gate == CalibrationGate()
    assert set(cfg.search.candidates) == set(FAMILIES)
    with pytest.raises(ValueError, match=r"synthesis\.n_seed: unknown key \(did you mean 'n_seeds'\?\)"):
        SynthesisConfig.from_dict({"n_seed": 3})


def test_pass_at_k_matches_enumeration():
    for n, c, k in [(8, 3, 1), (8, 3, 4), (8, 0, 4), (8, 6, 4), (5, 2, 2)]:
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(combinations(range(n), k))
        brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_group_statistics_and_gate():
    rewards = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0.5, 0], [0.5, 0.5, 0.5, 0.5]])
    success = rewards == 1
    s = group_statistics(rewards, success, pass_k=(1, 4, 8))
    assert s.mean_reward == pytest.approx(rewards.mean()) and s.success_rate == pytest.approx(5 / 16)
    assert s.reward_std == pytest.approx(rewards.std())
    assert (s.frac_all_success, s.frac_all_zero, s.frac_constant, s.frac_informative) == (0.25, 0.25, 0.75, 0.25)
    assert s.pass_at_k["1"] == pytest.approx(5 / 16) and s.pass_at_k["4"] == pytest.approx(0.5)
    assert "8" not in s.pass_at_k
    failures = gate_failures(s, CalibrationGate())
    assert any("all-success" in f for f in failures) and any("constant" in f for f in failures)
    assert not gate_failures(s, CalibrationGate(max_all_success=0.3, max_all_zero=0.3, max_constant=0.8))


def test_gate_bounds_are_inclusive_up_to_float_rounding():
    rewards = np.array([[0, 0, 0.7, 0.9], [1, 0.9, 0.3, 1]])  # the mean is 3/5, which floats read 0.6000000000000001
    s = group_statistics(rewards, rewards >= 1.0)
    assert s.mean_reward > 0.6 and not gate_failures(s, CalibrationGate())
    assert gate_failures(s, CalibrationGate(reward_max=0.59)) == ["mean reward 0.600 outside [0.2, 0.59]"]


def test_a_search_with_no_trials_is_refused():
    with pytest.raises(ValueError, match=r"synthesis\.search\.max_trials must be an integer >= 1, got 0"):
        SynthesisConfig.from_dict({"search": {"max_trials": 0}})


@pytest.mark.parametrize("capability", sorted(FAMILIES))
def test_calibration_with_imperfect_expert_lands_in_gate(cfg, capability):
    result = search_knobs(capability, replace(cfg, n_seeds=24))
    assert result.passed, [t.failures for t in result.trials]
    s, g = result.chosen.stats, cfg.gate
    assert g.reward_min <= s.mean_reward <= g.reward_max and g.success_min <= s.success_rate <= g.success_max
    assert s.reward_std >= g.min_std and s.frac_constant <= g.max_constant
    assert s.frac_all_success <= g.max_all_success and s.frac_all_zero <= g.max_all_zero
    # the search is ordered easy -> hard and stops at the first pass
    assert all(not t.passed for t in result.trials[:-1]) and result.trials[-1] is result.chosen


def test_impossible_gate_is_reported_and_not_emitted(cfg, tmp_path):
    strict = replace(cfg, n_seeds=8, group_size=4, gate=CalibrationGate(reward_min=0.95, reward_max=1.0))
    selected = read_selected(_selected_file(tmp_path, ["tool_calling_precision"]))
    report = synthesize(selected, strict, tmp_path / "gen")
    assert not report.emitted and report.failed[0]["capability"] == "tool_calling_precision"
    assert report.failed[0]["closest"]["failures"]
    assert not (tmp_path / "gen" / "manifest.json").exists()


def _selected_file(tmp_path, names):
    doc = {"thresholds": {}, "selected": [
        {"name": n, "description": f"{n} desc", "mean_cov": 0.3, "mean_delta": 0.4, "n_runs_passed": 9,
         "example_failed_cases": ["trace/retail-sim-v0|1|base"], "status": "PENDING"} for n in names]}
    path = tmp_path / "selected_capabilities.json"
    path.write_text(json.dumps(doc))
    return path


_PLAY = """
import gymnasium as gym, json, sys
import generated_envs
from trace_envs.families import FamilyExpert, play
generated_envs.load(sys.argv[2])
env_id = sys.argv[1]
env = gym.make("trace_envs:" + env_id)
reward, info = play(env, FamilyExpert(), 5)
print(json.dumps({"reward": reward, "success": info["success"], "knobs": info["task"]["difficulty"]}))
"""


def _fresh(gen_dir, *args, code=_PLAY):
    return subprocess.run([sys.executable, "-c", code, *args, str(gen_dir)], capture_output=True, text=True,
                          timeout=60, cwd=str(gen_dir))


def test_emission_round_trip(cfg, tmp_path):
    gen = tmp_path / "gen"
    selected = read_selected(_selected_file(tmp_path, ["multi_step_task_completion", "no_such_capability"]))
    assert selected[0].example_failed_ids == ["trace/retail-sim-v0|1|base"] and selected[0].extra["status"] == "PENDING"
    report = synthesize(selected, replace(cfg, n_seeds=16), gen, source="run-1")
    assert report.no_family == ["no_such_capability"]
    (entry,) = report.emitted
    assert entry["env_id"] == "trace/multi_step_task_completion-retail-sim-v0"
    manifest = json.loads((gen / "manifest.json").read_text())
    assert manifest["envs"] == [entry] and entry["source_run"] == "run-1" and entry["calibration"]["mean_reward"] <= 0.6
    import gymnasium as gym

    assert gym.spec(entry["env_id"]).kwargs == {"domain": "retail-sim", **entry["knobs"]}  # live in this process
    out = _fresh(gen, entry["env_id"])
    assert out.returncode == 0, out.stderr
    played = json.loads(out.stdout.strip().splitlines()[-1])
    assert played["reward"] == 1.0 and played["success"]
    assert {k: played["knobs"][k] for k in entry["knobs"]} == entry["knobs"]
    # a template env is a manifest row (data), not a generated module
    assert "module" not in entry and not list(gen.glob("*.py")) and entry["family"] == "multi_step_task_completion"
    check = ("import logging, trace_envs, generated_envs, gymnasium as gym, sys\n"
             "generated_envs.load(sys.argv[2])\n"
             "print(sys.argv[1] in gym.registry)\n")
    # a row naming no known family is skipped with a warning; removing the row unregisters the env
    (gen / "manifest.json").write_text(json.dumps({"envs": [{**entry, "family": "nope", "capability": "nope"}]}))
    out = _fresh(gen, entry["env_id"], code=check)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
    assert "unknown family 'nope'" in out.stderr
    (gen / "manifest.json").write_text(json.dumps({"envs": []}))
    out = _fresh(gen, entry["env_id"], code=check)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_calibrate_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "calibrate", "env=trace/tool_calling_precision-v0",
         "synthesis.n_seeds=12", "synthesis.group_size=6", f"out={tmp_path}", f"hydra.run.dir={tmp_path}/h"],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    doc = json.loads((tmp_path / "calibration.json").read_text())
    assert doc["env"] == "trace/tool_calling_precision-v0" and doc["stats"]["n_seeds"] == 12
    assert out.returncode == (0 if doc["passed"] else 1), out.stderr


def test_synthesize_cli(tmp_path):
    selected = _selected_file(tmp_path, ["tool_calling_precision", "no_such_capability"])
    out = subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "synthesize", f"selected={selected}", f"out_dir={tmp_path}/gen",
         "synthesis.n_seeds=12", f"out={tmp_path}", f"hydra.run.dir={tmp_path}/h"],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "no_such_capability" in out.stdout
    report = json.loads((tmp_path / "synthesis_report.json").read_text())
    assert [e["env_id"] for e in report["emitted"]] == ["trace/tool_calling_precision-retail-sim-v0"]
    rows = json.loads((tmp_path / "gen" / "manifest.json").read_text())["envs"]
    assert [(r["env_id"], r["family"]) for r in rows] == [("trace/tool_calling_precision-retail-sim-v0",
                                                          "tool_calling_precision")]
    assert not list((tmp_path / "gen").glob("*.py"))


def test_calibrate_cli_says_when_the_gate_is_passed_only_with_hints(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "calibrate", "env=trace/precondition_verification-v0",
         "+env_kwargs.refuse_fraction=0.9", "synthesis.hint_fraction=0.5", "synthesis.policy.hint_uptake=0.5",
         "synthesis.policy.knobs={precondition: 1.0}", "synthesis.n_seeds=40", f"out={tmp_path}",
         f"hydra.run.dir={tmp_path}/h"],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    doc = json.loads((tmp_path / "calibration.json").read_text())
    assert doc["stats"]["unhinted"]["success_rate"] < 0.2 <= doc["stats"]["success_rate"]
    assert doc["passed"] and doc["needs_hints"] is True and doc["unhinted_failures"], out.stderr
    assert out.returncode == 0 and "passes only with hints" in out.stdout
