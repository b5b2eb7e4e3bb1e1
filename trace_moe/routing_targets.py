"""Routing targets: which slot a task should be routed to, from the reward each slot earns on it alone.

The paper's gate warm start (``train/warmstart_gater.py``, ``../shared/reference/paper.md`` §5.2) builds a
routing target per task seed from per-capability rollout rewards on that seed and trains the gates towards it.
Here the target is hard (top-1, as the gates route at inference): the slot with the best mean reward on the
task, where slot 0 is the base alone and slot i the base with the i-th adapter alone.
"""

from __future__ import annotations

import numpy as np


def routing_targets(rewards: np.ndarray) -> np.ndarray:
    """Each task's slot from ``rewards`` (tasks x slots: the mean reward of each slot alone on each task).

    The best slot wins; a tie (every slot failing a task, or several solving it) goes to the tied slot with
    the best mean over all tasks, then to the lower index. So a task nobody tells apart is routed where the
    gates do best on average rather than to the base by default.
    """
    rewards = np.asarray(rewards, dtype=float)
    if rewards.ndim != 2 or rewards.shape[0] == 0 or rewards.shape[1] == 0:
        raise ValueError(f"rewards must be a non-empty tasks x slots matrix, got shape {rewards.shape}")
    if not np.isfinite(rewards).all():
        raise ValueError("rewards must be finite")
    overall = rewards.mean(axis=0)
    preference = sorted(range(rewards.shape[1]), key=lambda slot: (-overall[slot], slot))
    best = rewards.max(axis=1)
    return np.array([next(s for s in preference if row[s] >= top) for row, top in zip(rewards, best)], dtype=int)
