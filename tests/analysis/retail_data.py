"""Trajectories of the retail-sim scripted expert, as TrajectoryRecords (test helper)."""

from __future__ import annotations

import trace_envs  # noqa: F401 - registers the env ids
from trace_envs.retail_sim import ENV_ID, ExpertKnobs, ScriptedExpert
from trace_train.rollout.base import EpisodeRequest
from trace_train.rollout.scripted import ScriptedRolloutBackend
from trace_train.trajectory import TrajectoryRecord


def expert_records(knobs: ExpertKnobs, seeds: range, expert_seed: int = 1) -> list[TrajectoryRecord]:
    backend = ScriptedRolloutBackend(lambda sample_seed: ScriptedExpert(knobs, seed=sample_seed))
    return backend.rollout([EpisodeRequest(ENV_ID, seed=s, sample_seed=expert_seed) for s in seeds])
