"""A rollout backend for scripted policies (oracle, imperfect expert): no tokens, same records.

A scripted policy is any object with ``reset(observation, info, seed)`` and ``act(observation) -> str``
(``trace_envs.episode.ScriptedPolicy``, e.g. ``trace_envs.retail_sim.experts.ScriptedExpert``), played by
the one episode loop ``trace_envs.episode.play_scripted``. The member's ``sample_seed`` seeds the
policy, so members of one GRPO group (same env seed) can still differ.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from trace_envs.episode import EpisodeResult, ScriptedPolicy, play_scripted
from trace_envs.records import TrajectoryRecord, terminal_extras
from trace_train.rollout.base import ENV_ERROR, EpisodeRequest, SamplingParams, env_error_info

logger = logging.getLogger(__name__)


def play_episode(env: gym.Env, policy: ScriptedPolicy, request: EpisodeRequest) -> TrajectoryRecord:
    """Play one episode of ``policy`` on ``env`` (:func:`trace_envs.episode.play_scripted`) and return its
    record (``env_error`` if the env raises)."""
    result = play_scripted(env, policy, request.seed, options=request.reset_options(), catch_env_errors=True)
    if result.failure is not None:
        return _env_error_record(env, policy, request, result)
    info = result.info
    return TrajectoryRecord(
        env_id=env.spec.id if env.spec else request.env_id,
        seed=request.seed,
        messages=result.transcript,
        reward=result.reward,
        success=bool(info.get("success", result.reward == 1.0)),
        termination=result.termination,
        policy=policy.name,
        reward_breakdown=dict(info.get("reward_breakdown", {})),
        info={**terminal_extras(dict(info)), **_request_info(result.reset_info, request)},
        episode_id=_episode_id(request, policy),
    )


def _request_info(reset_info: dict[str, Any], request: EpisodeRequest) -> dict[str, Any]:
    return {"task": reset_info.get("task"), "tools": reset_info.get("tools"), "group": request.group,
            "sample_seed": request.sample_seed}


def _episode_id(request: EpisodeRequest, policy: ScriptedPolicy) -> str:
    return f"{request.env_id}|{request.seed}|{policy.name}|{request.sample_seed}"


def _env_error_record(env: gym.Env, policy: ScriptedPolicy, request: EpisodeRequest,
                      result: EpisodeResult) -> TrajectoryRecord:
    """The failed-trajectory record of an episode whose env raised (reward 0, ``ENV_ERROR``)."""
    failure = result.failure
    assert failure is not None
    exc = failure.error
    logger.warning("env %s (seed %d, sample seed %d) raised %s in %s at turn %d; the episode ends as %s",
                   request.env_id, request.seed, request.sample_seed, type(exc).__name__, failure.stage,
                   failure.turn, ENV_ERROR, exc_info=exc)
    return TrajectoryRecord(
        env_id=env.spec.id if env.spec else request.env_id,
        seed=request.seed,
        messages=result.transcript,  # the messages the policy saw and sent before the env raised
        reward=0.0,
        success=False,
        termination=ENV_ERROR,
        policy=policy.name,
        info={"env_error": env_error_info(exc, failure.stage, failure.turn),
              **_request_info(result.reset_info, request)},
        episode_id=_episode_id(request, policy),
    )


class ScriptedRolloutBackend:
    """``RolloutBackend`` over a scripted policy factory ``seed -> policy``."""

    def __init__(self, policy_factory: Callable[[int], ScriptedPolicy]):
        self.policy_factory = policy_factory
        self._envs: dict[tuple[str, str], gym.Env] = {}

    @staticmethod
    def _key(request: EpisodeRequest) -> tuple[str, str]:
        # JSON keys the cache so list- or dict-valued kwargs (``kinds=[...]``) work too.
        return request.env_id, json.dumps(request.env_kwargs, sort_keys=True, default=str)

    def _env(self, request: EpisodeRequest) -> gym.Env:
        key = self._key(request)
        if key not in self._envs:
            self._envs[key] = gym.make(request.env_id, **request.env_kwargs)
        return self._envs[key]

    def _drop_env(self, request: EpisodeRequest) -> None:
        env = self._envs.pop(self._key(request), None)
        try:
            if env is not None:
                env.close()
        except Exception:
            logger.warning("closing env %s failed", request.env_id, exc_info=True)

    def rollout(self, requests: Sequence[EpisodeRequest], sampling: SamplingParams | None = None,
                adapter: str | None = None) -> list[TrajectoryRecord]:
        if adapter is not None:
            raise ValueError("scripted policies have no adapters")
        records = []
        for request in requests:
            record = play_episode(self._env(request), self.policy_factory(request.sample_seed), request)
            if record.termination == ENV_ERROR:  # its state is suspect: the next request gets a fresh env
                self._drop_env(request)
            records.append(record)
        return records
