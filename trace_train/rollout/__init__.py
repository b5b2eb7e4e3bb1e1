"""Rollout backends: one interface (``RolloutBackend``), implementations ``hf`` and ``openai``."""

from trace_train.rollout.base import EpisodeRequest, RolloutBackend, SamplingParams

__all__ = ["EpisodeRequest", "RolloutBackend", "SamplingParams"]
