"""Calibration with hints (paper §3.5) on a scripted policy that reads them."""

import logging

import gymnasium as gym
import numpy as np
import pytest

import trace_envs  # noqa: F401
from trace_envs.synthesis import SynthesisConfig, calibrate_env, expert_collector, search_knobs
from trace_envs.synthesis.config import PolicyConfig, SearchConfig

ENV = "trace/precondition_verification-v0"


def _config(uptake: float, fraction: float, refuse_fraction: float = 0.5, n_seeds: int = 40) -> SynthesisConfig:
    return SynthesisConfig(
        n_seeds=n_seeds, group_size=8, hint_fraction=fraction,
        policy=PolicyConfig(knobs={"precondition": 1.0}, hint_uptake=uptake),
        search=SearchConfig(candidates={"precondition_verification": [{"refuse_fraction": refuse_fraction}]}),
    )


def _allowed_share(n_seeds: int, refuse_fraction: float) -> float:
    env = gym.make(ENV, refuse_fraction=refuse_fraction)
    return float(np.mean([env.reset(seed=s)[1]["task"]["case"] == "allow" for s in range(n_seeds)]))


def test_an_expert_that_always_reads_the_hint_solves_every_hinted_episode():
    cfg = _config(uptake=1.0, fraction=0.5)
    stats = calibrate_env(ENV, {}, expert_collector(cfg), cfg)
    allowed = _allowed_share(cfg.n_seeds, 0.5)
    # Knob 1.0 acts on every request: exactly the allowed cases succeed unhinted; hinted it is the oracle.
    assert stats.unhinted.success_rate == pytest.approx(allowed)
    assert stats.hinted.success_rate == 1.0
    assert stats.success_rate == pytest.approx((allowed + 1.0) / 2)
    assert stats.hinted.n_seeds == stats.unhinted.n_seeds == cfg.n_seeds
    assert stats.hinted.group_size == stats.unhinted.group_size == 4


def test_a_half_reading_expert_gets_half_of_the_refusals_when_hinted():
    cfg = _config(uptake=0.5, fraction=0.5, n_seeds=60)
    stats = calibrate_env(ENV, {}, expert_collector(cfg), cfg)
    allowed = _allowed_share(cfg.n_seeds, 0.5)
    assert stats.unhinted.success_rate == pytest.approx(allowed)
    expected = allowed + 0.5 * (1.0 - allowed)  # 240 hinted episodes: binomial sd of the refusal half ~0.05
    assert abs(stats.hinted.success_rate - expected) < 0.12


def test_no_hint_fraction_means_no_split_and_the_reading_expert_is_unchanged():
    cfg = _config(uptake=1.0, fraction=0.0, n_seeds=20)
    stats = calibrate_env(ENV, {}, expert_collector(cfg), cfg)
    assert stats.hinted is None and stats.unhinted is None
    assert stats.success_rate == pytest.approx(_allowed_share(20, 0.5))


def test_a_family_too_hard_unhinted_passes_the_gate_with_hints_and_says_so(caplog):
    hard = _config(uptake=0.5, fraction=0.5, refuse_fraction=0.9)
    with caplog.at_level(logging.INFO, logger="trace_envs.synthesis.calibrate"):
        result = search_knobs("precondition_verification", hard)
    trial = result.trials[0]
    assert trial.unhinted_failures  # alone, the unhinted members are below the gate
    assert trial.passed and trial.needs_hints
    assert result.to_dict()["chosen"]["needs_hints"] is True
    # the log line names the bounds the unhinted half misses, and the group size it is judged at
    line = next(r.getMessage() for r in caplog.records if "PASS" in r.getMessage())
    assert "passes only with hints: unhinted alone, " in line
    assert all(failure in line for failure in trial.unhinted_failures)
    unhinted_only = search_knobs("precondition_verification", _config(uptake=0.5, fraction=0.0, refuse_fraction=0.9))
    assert not unhinted_only.passed and unhinted_only.trials[0].unhinted_failures is None


def test_a_hint_the_policy_ignores_never_reads_as_needed():
    """The unhinted half plays groups of G/2, whose all-zero and constant shares exceed a G-group's by chance;
    only the per-episode bounds judge it, so an env passing without hints never "passes only with hints"."""
    for perturb in (0.3, 0.6, 1.0):
        def cfg(fraction):
            return SynthesisConfig(n_seeds=32, group_size=8, hint_fraction=fraction,
                                   policy=PolicyConfig(hint_uptake=0.0),
                                   search=SearchConfig(candidates={"tool_calling_precision": [
                                       {"perturb_prob": perturb, "prefill_ask": False}]}))
        plain, hinted = (search_knobs("tool_calling_precision", cfg(f)).trials[0] for f in (0.0, 0.5))
        assert hinted.stats.mean_reward == plain.stats.mean_reward  # the hint changes nothing
        assert plain.passed and hinted.passed and not hinted.needs_hints, (perturb, hinted.unhinted_failures)
        assert hinted.stats.unhinted.frac_all_zero > 0.2  # a group bound the unhinted half alone misses
