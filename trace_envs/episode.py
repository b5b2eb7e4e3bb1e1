"""The one episode loop for scripted policies (experts, family experts, calibration, gold replay, the
scripted rollout backend all play through :func:`play_scripted`).

A *scripted policy* has ``reset(observation, info, seed)`` and ``act(observation) -> str``; a plain
callable ``observation -> str`` is wrapped by :func:`as_scripted`. The transcript travels in the
terminal ``info`` (``TerminalInfo['transcript']``, set by ``ToolUseEnv``), never through ``env.unwrapped``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from trace_envs.records import TerminalInfo

logger = logging.getLogger(__name__)

Observation = list[dict[str, Any]]


@runtime_checkable
class ScriptedPolicy(Protocol):
    """A policy that needs no model: reset with the reset info, then one action text per turn."""

    name: str

    def reset(self, observation: Observation, info: dict[str, Any], seed: int | None = None) -> None: ...

    def act(self, observation: Observation) -> str: ...


class CallablePolicy:
    """A callable ``observation -> action text`` as a :class:`ScriptedPolicy` (reset does nothing)."""

    def __init__(self, fn: Callable[[Observation], str], name: str | None = None):
        if not callable(fn):
            raise TypeError(f"a scripted policy must be callable or have reset()/act(), got {type(fn).__name__}")
        self.fn = fn
        self.name = name or type(fn).__name__

    def reset(self, observation: Observation, info: dict[str, Any], seed: int | None = None) -> None:
        return None

    def act(self, observation: Observation) -> str:
        return self.fn(observation)


def as_scripted(policy: Any, name: str | None = None) -> ScriptedPolicy:
    """``policy`` itself when it has ``reset``/``act``, else a :class:`CallablePolicy` around it."""
    if callable(getattr(policy, "reset", None)) and callable(getattr(policy, "act", None)):
        return policy
    return CallablePolicy(policy, name)


@dataclass
class EnvFailure:
    """The env raised: in ``reset`` or in ``step`` (at ``turn``, 1-based)."""

    stage: str
    turn: int
    error: Exception


@dataclass
class EpisodeResult:
    """One played episode. ``info`` is the terminal step's info (empty when the env failed)."""

    seed: int
    reset_info: dict[str, Any]
    info: TerminalInfo
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    turns: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)
    failure: EnvFailure | None = None

    @property
    def success(self) -> bool:
        return bool(self.info.get("success", False))

    @property
    def termination(self) -> str:
        return str(self.info.get("termination", "unknown"))


def play_scripted(env: Any, policy: Any, seed: int, options: dict[str, Any] | None = None,
                  catch_env_errors: bool = False, max_turns: int | None = None) -> EpisodeResult:
    """Play one episode of ``policy`` (a :class:`ScriptedPolicy` or a callable) on ``env`` from ``seed``.

    The policy is reset with the reset info and ``seed``. With ``catch_env_errors`` an exception of
    the env (not of the policy) ends the episode with ``failure`` set and the messages seen so far as
    the transcript; otherwise it propagates. ``max_turns`` guards against an env that never ends.
    """
    scripted = as_scripted(policy)
    try:
        obs, reset_info = env.reset(seed=seed, options=options)
    except Exception as exc:
        if not catch_env_errors:
            raise
        return EpisodeResult(seed=seed, reset_info={}, info={}, failure=EnvFailure("reset", 0, exc))
    scripted.reset(obs, reset_info, seed=seed)
    # What the policy saw and said, system prompt first: the transcript if the env fails mid-episode.
    system = reset_info.get("system_prompt") if isinstance(reset_info, dict) else None
    seen: list[dict[str, Any]] = [{"role": "system", "content": system}] if isinstance(system, str) else []
    seen.extend(obs)
    turn = 0
    while True:
        if max_turns is not None and turn >= max_turns:
            raise RuntimeError(f"the episode did not end within {max_turns} turns")
        action = scripted.act(obs)
        turn += 1
        seen.append({"role": "assistant", "content": action})
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as exc:
            if not catch_env_errors:
                raise
            return EpisodeResult(seed=seed, reset_info=reset_info, info={}, turns=turn, transcript=seen,
                                 failure=EnvFailure("step", turn, exc))
        seen.extend(obs)
        if terminated or truncated:
            break
    transcript = info.get("transcript")
    if transcript is None:
        logger.debug("env %s puts no transcript in its terminal info; using the messages the policy saw", env)
        transcript = seen
    return EpisodeResult(seed=seed, reset_info=reset_info, info=info, reward=float(reward),
                         terminated=bool(terminated), truncated=bool(truncated), turns=turn,
                         transcript=list(transcript))
