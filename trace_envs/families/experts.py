"""Scripted policies for the families: the domain's own scripted expert, with difficulty-aware knobs.

Family tasks have the target's task shape, so the domain's expert (retail-sim: ``ScriptedExpert``)
plays them unchanged and the knob semantics are shared. A harder family instance gives a policy
lacking a capability more chances to fail: the episode annotation ``info['task']['hazards']`` says,
per knob, how many independent chances h the task offers, and the family expert uses the per-episode
knob 1 - (1 - k)^h. The oracle (all knobs 0) and a knob at 1.0 are unchanged by this.

A hinted episode (``info['hint']`` set, paper §3.5) is read with probability ``hint_uptake``: the
expert then follows the guidance, so its knob for the env's capability becomes (1 - uptake) × k —
a scripted stand-in for an instruct model that reads guidance some of the time.
"""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any

from trace_envs.domains import get_domain
from trace_envs.episode import play_scripted
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB

KNOBS = ("precondition", "structured", "multi_step", "precision")


def effective_knobs(knobs: dict[str, float], hazards: dict[str, int]) -> dict[str, float]:
    """Per-episode knobs: ``1 - (1 - k) ** hazards.get(name, 1)``."""
    return {name: 1.0 - (1.0 - float(k)) ** max(0, int(hazards.get(name, 1))) for name, k in knobs.items()}


class FamilyExpert:
    """``reset(obs, info, seed)`` / ``act(obs)``, like ``ScriptedExpert``; works on retail-sim too."""

    def __init__(self, knobs: Any = None, seed: int = 0, name: str | None = None, hint_uptake: float = 0.0):
        if knobs is None:
            knobs = {}
        self.knobs: dict[str, float] = dict(asdict(knobs) if is_dataclass(knobs) else knobs)
        unknown = set(self.knobs) - set(KNOBS)
        if unknown:
            raise ValueError(f"unknown expert knob(s) {sorted(unknown)}; known: {KNOBS}")
        if not 0.0 <= hint_uptake <= 1.0:
            raise ValueError(f"hint_uptake must be in [0, 1], got {hint_uptake}")
        self.hint_uptake = float(hint_uptake)
        self.seed = seed
        self.name = name or ("oracle" if not any(self.knobs.values()) else "imperfect-expert")
        self._inner: Any = None

    def reset(self, observation: list[dict[str, Any]], info: dict[str, Any], seed: int | None = None) -> None:
        task = info["task"]
        knobs = effective_knobs(self.knobs, task.get("hazards", {}))
        hinted_knob = CAPABILITY_TO_KNOB.get(task.get("capability", "")) if info.get("hint") else None
        if hinted_knob in knobs:
            knobs[hinted_knob] *= 1.0 - self.hint_uptake
        self._inner = get_domain(task.get("domain", "retail-sim")).scripted_policy(knobs, seed=self.seed)
        self._inner.reset(observation, info, seed=seed)

    def act(self, observation: list[dict[str, Any]]) -> str:
        if self._inner is None:
            raise RuntimeError("call reset() first")
        return self._inner.act(observation)


def play(env: Any, policy: Any, seed: int) -> tuple[float, dict[str, Any]]:
    """One episode of ``policy`` on ``env`` (:func:`trace_envs.episode.play_scripted`); returns
    (reward, final info incl. ``task``)."""
    result = play_scripted(env, policy, seed)
    return result.reward, {**result.info, "task": result.reset_info["task"]}
