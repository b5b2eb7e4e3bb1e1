"""Calibration against a model (paper §3.4) and emitting the closest setting when no candidate passes."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

import trace_envs  # noqa: F401
from trace_envs.synthesis import CalibrationGate, PolicyConfig, SynthesisConfig, calibrate_env, search_knobs, synthesize
from trace_envs.synthesis.emit import SelectedCapability
from trace_train.calibration import collector_for, model_collector
from trace_train.policies import PolicySpec
from trace_train.rollout.base import group_requests

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "checkpoints" / "retail-sim-tiny"


@pytest.fixture(scope="module")
def cfg():
    return SynthesisConfig.from_dict(yaml.safe_load((REPO / "conf" / "synthesis" / "default.yaml").read_text()))


def test_requests_share_the_env_seed_inside_a_group_and_nothing_else():
    requests = group_requests("trace/tool_calling_precision-v0", {"domain": "retail-sim"}, [5, 9], 3)
    assert [(r.seed, r.group) for r in requests] == [(5, 0)] * 3 + [(9, 1)] * 3
    assert len({r.sample_seed for r in requests}) == 3  # members differ; groups reuse member seeds
    assert all(r.env_kwargs == {"domain": "retail-sim"} for r in requests)


def test_model_collector_plays_the_grid_and_is_reproducible(cfg):
    spec = PolicySpec(kind="hf", name="base", model=str(SHIPPED), max_new_tokens=48)
    small = replace(cfg, n_seeds=2, group_size=3)
    first = model_collector(spec, batch=6)("trace/tool_calling_precision-v0", {"perturb_prob": 0.0}, [0, 1], 3)
    again = model_collector(spec, batch=4)("trace/tool_calling_precision-v0", {"perturb_prob": 0.0}, [0, 1], 3)
    rewards, successes = first
    assert rewards.shape == successes.shape == (2, 3) and successes.dtype == bool
    assert np.array_equal(rewards, again[0]) and np.array_equal(successes, again[1])  # batching changes nothing
    assert ((rewards >= 0) & (rewards <= 1)).all() and (rewards[successes] == 1.0).all()
    stats = calibrate_env("trace/tool_calling_precision-v0", {"perturb_prob": 0.0},
                          lambda *args: first, small)
    assert stats.mean_reward == pytest.approx(rewards.mean()) and stats.n_seeds == 2 and stats.group_size == 3


def test_a_collector_of_the_wrong_shape_is_refused(cfg):
    with pytest.raises(ValueError, match="expected"):
        calibrate_env("trace/tool_calling_precision-v0", {}, lambda *a: (np.zeros((1, 1)), np.zeros((1, 1))), cfg)


def test_policy_kind_is_checked_and_a_model_policy_needs_a_model(cfg):
    with pytest.raises(ValueError, match="kind"):
        PolicyConfig(kind="llm")
    assert collector_for(cfg) is None  # scripted: search_knobs' own default
    with pytest.raises(ValueError, match="synthesis.policy.model"):
        collector_for(replace(cfg, policy=PolicyConfig(kind="model")))


def test_the_search_follows_the_collector(cfg):
    """A collector whose policy only succeeds on 2-op tasks makes the search stop at the 2-op candidate."""
    seen = []

    def collector(env_id, env_kwargs, seeds, group_size):
        seen.append(env_kwargs)
        rate = 0.5 if env_kwargs["max_ops"] == 2 else 0.0
        successes = np.arange(len(seeds) * group_size).reshape(len(seeds), group_size) % 2 < rate * 2
        return successes.astype(float), successes

    result = search_knobs("multi_step_task_completion", cfg, collector=collector)
    assert result.passed and result.chosen.knobs == {"min_ops": 2, "max_ops": 2}
    assert seen == [{"domain": "retail-sim", "min_ops": 2, "max_ops": 2}]


def test_a_domain_ladder_replaces_the_capabilitys_on_that_domain_only(cfg):
    """The quick preset's ``structured_data_reasoning@retail-sim`` ladder (retail-sim's price_bound selections) is
    what retail-sim tries; a τ² domain keeps the capability's default ladder (price_bound is retail-sim's only)."""
    quick = yaml.safe_load((REPO / "conf" / "preset" / "quick.yaml").read_text())["synthesis"]["search"]["candidates"]
    merged = replace(cfg, search=replace(cfg.search, candidates={**cfg.search.candidates, **quick}))
    retail = merged.search.ladder("structured_data_reasoning", "retail-sim")
    assert retail and all(k["selection_style"] == "price_bound" for k in retail)
    assert merged.search.ladder("structured_data_reasoning", "tau2-retail") == \
        cfg.search.candidates["structured_data_reasoning"]
    assert merged.search.ladder("multi_step_task_completion", "retail-sim") == \
        cfg.search.candidates["multi_step_task_completion"]
    assert merged.search.ladder("no_such_capability", "retail-sim") == [{}]
    seen = []

    def collector(env_id, env_kwargs, seeds, group_size):
        seen.append(env_kwargs)
        return np.zeros((len(seeds), group_size)), np.zeros((len(seeds), group_size), dtype=bool)

    search_knobs("structured_data_reasoning", merged, collector=collector)
    assert seen == [{"domain": "retail-sim", **k} for k in retail]


def test_the_search_can_stop_at_the_first_candidate_that_is_too_hard(cfg):
    seen = []

    def hopeless(env_id, env_kwargs, seeds, group_size):
        seen.append(env_kwargs)
        return np.zeros((len(seeds), group_size)), np.zeros((len(seeds), group_size), dtype=bool)

    full = search_knobs("multi_step_task_completion", cfg, collector=hopeless)
    assert not full.passed and len(seen) == len(cfg.search.candidates["multi_step_task_completion"])
    seen.clear()
    early = replace(cfg, search=replace(cfg.search, stop_when_too_hard=True))
    result = search_knobs("multi_step_task_completion", early, collector=hopeless)
    assert not result.passed and len(result.trials) == len(seen) == 1


def test_accept_closest_emits_the_closest_setting_and_says_so(cfg, tmp_path):
    strict = replace(cfg, n_seeds=6, group_size=4, gate=CalibrationGate(reward_min=0.95, reward_max=1.0),
                     accept_closest=True)
    report = synthesize([SelectedCapability("tool_calling_precision")], strict, tmp_path / "gen")
    (entry,) = report.emitted
    (failed,) = report.failed
    assert failed["capability"] == "tool_calling_precision" and failed["emitted"] is True
    assert entry["passed_gate"] is False and entry["knobs"] == failed["closest"]["knobs"]
    assert json.loads((tmp_path / "gen" / "manifest.json").read_text())["envs"] == [entry]


def test_calibrate_cli_with_the_model_as_policy(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "calibrate", "env=trace/tool_calling_precision-v0",
         "synthesis.policy.kind=model", f"synthesis.policy.model={SHIPPED}", "synthesis.n_seeds=2",
         "synthesis.group_size=2", f"out={tmp_path}", f"hydra.run.dir={tmp_path}/h"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    doc = json.loads((tmp_path / "calibration.json").read_text())
    assert doc["stats"]["n_seeds"] == 2 and doc["stats"]["group_size"] == 2
    assert out.returncode == (0 if doc["passed"] else 1), out.stderr[-2000:]
