"""Calibration against a model (paper §3.4: the base model's rollouts decide an env's difficulty).

``model_collector`` turns a policy spec into a ``trace_envs.synthesis.Collector``: every (seed, member)
pair of a calibration becomes one ``EpisodeRequest`` and the whole grid is played through the batched
rollout backend, so calibrating with a model costs a few batched rollouts per difficulty candidate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.synthesis import Collector, SynthesisConfig
from trace_train.policies import PolicySpec, build_backend
from trace_train.rollout.base import group_requests


def model_collector(spec: PolicySpec, batch: int = 64, sample_seed: int = 0) -> Collector:
    """A collector that plays ``spec`` (an hf/composed/openai policy) in batches of ``batch`` episodes."""
    from trace_train.rollout.loop import run_rollouts

    backend, adapter = build_backend(spec)

    def run(env_id: str, env_kwargs: dict[str, Any], seeds: list[int], group_size: int,
            hinted: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
        requests = group_requests(env_id, env_kwargs, seeds, group_size, sample_seed, hinted)
        records = run_rollouts(backend, requests, spec.sampling, adapter, batch,
                               label=f"calibrate {env_id.removeprefix('trace/')}")
        shape = (len(seeds), group_size)
        rewards = np.array([r.reward for r in records], dtype=float).reshape(shape)
        successes = np.array([bool(r.success) for r in records], dtype=bool).reshape(shape)
        return rewards, successes

    return run


def collector_for(cfg: SynthesisConfig, model_spec: PolicySpec | None = None) -> Collector | None:
    """The collector ``cfg.policy`` asks for: None for the scripted expert (the default path of
    ``search_knobs``), else the model of ``model_spec`` (the pipeline's base) or of ``cfg.policy.model``."""
    p = cfg.policy
    if p.kind == "scripted":
        return None
    if model_spec is None:
        if not p.model:
            raise ValueError("synthesis.policy.kind=model needs synthesis.policy.model=<local HF directory>")
        model_spec = PolicySpec(kind="hf", name="calibration", model=p.model, render_tools=p.render_tools,
                                temperature=p.temperature)
    return model_collector(model_spec, sample_seed=p.seed)
