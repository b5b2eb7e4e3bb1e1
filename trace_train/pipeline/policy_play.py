"""The pipeline's policies: their specs from ``pipeline.policy`` (and how stage hashes see it), and playing one on
an env's split."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from trace_envs.records import TrajectoryRecord
from trace_train.pipeline.config import PipelineConfig
from trace_train.policies import PolicySpec, run_policy_fields


def base_spec(cfg: PipelineConfig, model: str, name: str = "base", adapter: str | None = None,
              kind: str | None = None, system_suffix: str = "") -> PolicySpec:
    """The pipeline's policy ``name`` (with ``adapter``): ``pipeline.policy.kind`` (hf, or openai at
    ``pipeline.policy.base_urls``, adapters hot-loaded into the server) unless ``kind`` is given (``composed``);
    the fields come from :func:`trace_train.policies.run_policy_fields`, as ``trace-rl bench run_policies=true``
    reads them back from a run's ``pipeline.json``."""
    return PolicySpec(name=name, adapter=adapter, system_suffix=system_suffix,
                      **run_policy_fields(asdict(cfg.policy), model, kind))


def policy_hash_part(cfg: PipelineConfig) -> dict[str, Any]:
    """``pipeline.policy`` as stage hashes see it: without the backend keys while they are the defaults (hf), so
    runs made before ``pipeline.policy.kind`` existed keep their hashes."""
    part = asdict(cfg.policy)
    if part["kind"] == "hf" and not part["base_urls"] and part["served_model"] is None and not part["server"]:
        for key in ("kind", "base_urls", "served_model", "server"):
            part.pop(key)
    return part


def play(spec: PolicySpec, env_id: str, split: str, episodes: int, offset: int = 0, trials: int = 1,
         batch: int = 32, env_kwargs: dict[str, Any] | None = None) -> list[TrajectoryRecord]:
    """``episodes`` seeds of ``split`` from ``offset`` (``trials`` each) played by ``spec``, ``batch`` at once."""
    from trace_train.policies import build_backend
    from trace_train.rollout.loop import rollout_requests, run_rollouts

    backend, adapter = build_backend(spec)
    requests = rollout_requests(env_id, dict(env_kwargs or {}), split, episodes, offset, trials)
    return run_rollouts(backend, requests, spec.sampling, adapter, batch, label=f"{spec.name:>16}")
