"""``trace/tool_calling_precision-v0``: the conversation starts after authentication and lookups; the
agent must emit the exact mutation call.

Transfer rationale: the target's failures of this capability call the right tool with imprecise
arguments (a default cancel reason, the wrong refund method, a dropped address line). The opening
observation holds the user's request and the pre-filled identification and lookup calls with their
real results; with probability ``perturb_prob`` the user first states a wrong argument and corrects
it before the agent acts. With ``prefill_ask`` (the default, the v0 episodes) the prefill also holds the
env's own "Shall I go ahead?" and the user's yes; ``prefill_ask=False`` ends it after the lookups, so the
agent confirms in its own words before the call, as it does on the target (a base cloned from the
target's expert never saw the env's ask: at ``perturb_prob=0`` the shipped base's T = 1 success goes from
0.01 to 0.13-0.19). A perturbed task keeps the ask either way: the user's correction needs that turn.

Reward (paper §3.3, τ²-style): 1.0 if the end state equals the gold replay's DB hash and the entity is
named to the user, 0.5 for the DB alone, 0 otherwise.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from trace_envs.core.communication import communicated
from trace_envs.core.kwarg_checks import choices, number
from trace_envs.core.tool_env import Score
from trace_envs.families.base import FamilyEnv, FamilyEpisode, FamilyTask

PREFILL_ASK = "Thank you, I have your account and order details. Shall I go ahead?"


class ToolCallingPrecisionEnv(FamilyEnv):
    """Difficulty knob: ``perturb_prob`` (chance the user first gives a wrong argument, then fixes it);
    ``prefill_ask`` (see the module docstring); ``request_kinds`` (the domain's exact request kinds to draw from,
    e.g. ``["cancel", "return"]`` to leave out copying a whole address; default all of them);
    ``contrast_fraction`` (chance that a kind with a default-valued form -- the domain's ``plain`` kinds, e.g. a
    cancel "because I no longer need it" -- is drawn in that form: the user states the value a sloppy agent writes
    anyway. Without contrast every retail cancel states "ordered by mistake", so an agent that always writes that
    reason solves the env without reading the request; with it only copying what the user said solves every
    episode. A contrast episode is never perturbed, and the knob cannot fail it: ``hazards`` precision 0)."""

    capability = "tool_calling_precision"

    def __init__(self, domain: str = "retail-sim", perturb_prob: float = 0.3, prefill_ask: bool = True,
                 request_kinds: list[str] | tuple[str, ...] | None = None, contrast_fraction: float = 0.0,
                 max_steps: int = 30, max_errors: int = 5, render_mode: str | None = None):
        super().__init__(domain=domain, max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        self.perturb_prob = number("perturb_prob", perturb_prob)
        self.contrast_fraction = number("contrast_fraction", contrast_fraction)
        if not isinstance(prefill_ask, bool):
            raise ValueError(f"prefill_ask must be a bool, got {prefill_ask!r}")
        self.prefill_ask = prefill_ask
        known = self.domain.kinds("exact")
        chosen = choices("request_kinds", request_kinds, known)
        request_kinds = None if chosen is None else tuple(chosen)
        self.request_kinds = request_kinds
        if self.contrast_fraction > 0 and not set(request_kinds or known) & set(self.domain.kinds("plain")):
            raise ValueError(f"contrast_fraction: none of the request kinds {list(request_kinds or known)} has a "
                             f"default-valued form on {domain} (its plain kinds: {list(self.domain.kinds('plain'))})")

    def build_task(self, world: Any, rng: np.random.Generator, options: dict[str, Any] | None) -> FamilyTask:
        kinds = self.request_kinds or self.domain.kinds("exact")
        kind = kinds[int(rng.integers(len(kinds)))]
        # drawn only when the knob is on, so the v0 episodes keep their random stream
        if (self.contrast_fraction > 0 and kind in self.domain.kinds("plain")
                and rng.random() < self.contrast_fraction):
            return FamilyTask(case="contrast", requests=[self.domain.plain_request(world, rng, kind)],
                              difficulty=self._difficulty(), hazards={"precision": 0})
        request = self.domain.exact_request(world, rng, kind)
        perturbed = bool(rng.random() < self.perturb_prob)
        if perturbed:
            request.details["correction"] = self.domain.apply_correction(world, rng, request)
        return FamilyTask(case="perturbed" if perturbed else "direct", requests=[request],
                          difficulty=self._difficulty(), hazards={"precision": 2 if perturbed else 1})

    def _difficulty(self) -> dict[str, Any]:
        difficulty: dict[str, Any] = {"perturb_prob": self.perturb_prob}  # the v0 annotation, unchanged
        if not self.prefill_ask:
            difficulty["prefill_ask"] = False
        if self.request_kinds is not None:  # named only when set
            difficulty["request_kinds"] = list(self.request_kinds)
        if self.contrast_fraction > 0:
            difficulty["contrast_fraction"] = self.contrast_fraction
        return difficulty

    def prepare(self, episode: FamilyEpisode, rng: np.random.Generator) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": episode.user.opening()}]
        for index, (name, args) in enumerate(self.domain.lookup_calls(episode.world, episode.requests)):
            call_id = f"prefill_{index}"
            result = episode.tools.call(name, args)  # reads only: the DB is unchanged
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result.output})
        fix = episode.requests[0].details.get("correction")
        if self.prefill_ask or fix:
            messages.append({"role": "assistant", "content": PREFILL_ASK})
            messages.append({"role": "user",
                             "content": f"{fix} Yes, please go ahead." if fix else "Yes, please go ahead."})
        episode.prefill = messages

    def score_episode(self, episode: FamilyEpisode, transcript: list[dict[str, Any]]) -> Score:
        request = episode.requests[0]
        db_ok = episode.db_matches_gold()
        told = communicated(transcript, [request.entity_id])
        reward = (1.0 if told else 0.5) if db_ok else 0.0
        return Score(reward, reward == 1.0, {"db": float(db_ok), "communicate": float(told)})
