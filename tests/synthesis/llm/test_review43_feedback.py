"""The LLM env generator's calibration feedback says which way to move: "too hard" / "too easy" only when a rate is
outside its bounds; rates inside them with constant groups (each seed always solved or always failed) ask for
rollouts of one seed to differ."""

from __future__ import annotations

import numpy as np

from trace_envs.synthesis.calibrate import gate_failures, group_statistics
from trace_envs.synthesis.config import CalibrationGate
from trace_train.synthesis.generator import _calibration_feedback


def _feedback(rewards: list[list[float]]) -> tuple[list[str], str]:
    r = np.array(rewards)
    stats = group_statistics(r, r >= 1.0)
    failures = gate_failures(stats, CalibrationGate())
    return failures, _calibration_feedback(failures, stats.to_dict(), CalibrationGate())


def test_constant_groups_inside_the_rate_bounds_are_not_called_too_hard():
    failures, text = _feedback([[1.0] * 4] * 4 + [[0.0] * 4] * 6)  # success 0.4, reward 0.4: inside [0.2, 0.6]
    assert any("constant groups" in f for f in failures)
    assert "too hard" not in text and "too easy" not in text
    assert "seed" in text and "differ" in text


def test_rates_outside_the_bounds_give_their_direction():
    assert "too hard" in _feedback([[0.0, 0.0, 0.0, 0.0]] * 9 + [[1.0, 0.0, 0.0, 0.0]])[1]  # success 0.025
    assert "too easy" in _feedback([[1.0, 1.0, 1.0, 0.0]] * 10)[1]
