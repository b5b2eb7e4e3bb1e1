"""A rollout backend for scripted policies (oracle, imperfect expert): no tokens, same records.

A scripted policy is any object with ``reset(observation, info, seed)`` and ``act(observation) -> str``
(see ``trace_envs.retail_sim.experts.ScriptedExpert``). The member's ``sample_seed`` seeds the policy,
so members of one GRPO group (same env seed) can still differ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import gymnasium as gym

from trace_train.rollout.base import EpisodeRequest, SamplingParams
from trace_train.trajectory import TrajectoryRecord


class ScriptedPolicy(Protocol):
    name: str

    def reset(self, observation: list[dict[str, Any]], info: dict[str, Any], seed: int | None = None) -> None: ...

    def act(self, observation: list[dict[str, Any]]) -> str: ...


def play_episode(env: gym.Env, policy: ScriptedPolicy, request: EpisodeRequest) -> TrajectoryRecord:
    """Play one episode of ``policy`` on ``env`` and return its record."""
    obs, reset_info = env.reset(seed=request.seed)
    policy.reset(obs, reset_info, seed=request.seed)  # the policy itself was seeded with sample_seed
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs))
        if terminated or truncated:
            break
    transcript = env.unwrapped.transcript
    extra = {k: v for k, v in info.items() if k not in {"reward", "success", "reward_breakdown", "termination"}}
    return TrajectoryRecord(
        env_id=env.spec.id if env.spec else request.env_id,
        seed=request.seed,
        messages=transcript,
        reward=float(reward),
        success=bool(info.get("success", reward == 1.0)),
        termination=str(info.get("termination", "unknown")),
        policy=policy.name,
        reward_breakdown=dict(info.get("reward_breakdown", {})),
        info={**extra, "task": reset_info.get("task"), "tools": reset_info.get("tools"), "group": request.group,
              "sample_seed": request.sample_seed},
        episode_id=f"{request.env_id}|{request.seed}|{policy.name}|{request.sample_seed}",
    )


class ScriptedRolloutBackend:
    """``RolloutBackend`` over a scripted policy factory ``seed -> policy``."""

    def __init__(self, policy_factory: Callable[[int], ScriptedPolicy]):
        self.policy_factory = policy_factory
        self._envs: dict[tuple[str, str], gym.Env] = {}

    def _env(self, request: EpisodeRequest) -> gym.Env:
        # JSON keys the cache so list- or dict-valued kwargs (``kinds=[...]``) work too.
        key = (request.env_id, json.dumps(request.env_kwargs, sort_keys=True, default=str))
        if key not in self._envs:
            self._envs[key] = gym.make(request.env_id, **request.env_kwargs)
        return self._envs[key]

    def rollout(self, requests: Sequence[EpisodeRequest], sampling: SamplingParams | None = None,
                adapter: str | None = None) -> list[TrajectoryRecord]:
        if adapter is not None:
            raise ValueError("scripted policies have no adapters")
        return [play_episode(self._env(r), self.policy_factory(r.sample_seed), r) for r in requests]
