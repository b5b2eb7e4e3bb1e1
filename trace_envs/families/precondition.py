"""``trace/precondition_verification-v0``: single write requests, about half of which must be refused.

Transfer rationale: the target's failures of this capability are writes made without checking that
the request is allowed (another customer's order, a status that forbids the change). Each episode is
one request on the domain's tools and policy; a refusal case fails one precondition (policy-only ones
such as ownership, which the tools would accept, or tool-enforced ones such as status). Reward
(paper §3.3): refusal case — 0 if any write tool is called, 1.0 for a refusal that names the entity
and the reason, 0.5 for a bare refusal, 0 otherwise; allowed case — 1.0 for the gold end state with
the entity named to the user, 0.5 for the gold end state alone, 0 otherwise.

A refusal counts only when it comes after the agent read the record it refuses about
(``trace_envs.families.base.checked_at``: a successful read call naming the entity that returned it, or, for τ²
retail's authentication case, the failed lookup of the identity the user gave): a refusal made without looking
(every case's reason words in one text, sent before any tool call) scores 0, as the target's ``success`` does not
count a refusal that guessed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.core.communication import assistant_texts, communicated, is_refusal
from trace_envs.core.kwarg_checks import number
from trace_envs.core.tool_env import Score
from trace_envs.families.base import FamilyEnv, FamilyEpisode, FamilyTask, checked_at, refusal_explained
from trace_envs.twins import twin_requested

ENFORCED_CASES = ("status",)  # refusal cases whose write the tools themselves reject


class PreconditionVerificationEnv(FamilyEnv):
    """Difficulty knobs: ``refuse_fraction`` (share of refusal cases), ``unenforced_share`` (share of
    refusals whose failed precondition only the policy forbids, i.e. a write would succeed; default 0.7, and
    1.0 only on a domain without a tool-enforced refusal case, e.g. tau2-airline).
    ``act_credit``: reward of an allowed case whose end state is wrong although the agent did call the
    gold write tool on the requested entity (it decided right and executed wrong); 0 keeps the reward
    binary in the decision's outcome, a small value gives the act-or-refuse decision its own signal."""

    capability = "precondition_verification"

    def __init__(self, domain: str = "retail-sim", refuse_fraction: float = 0.5,
                 unenforced_share: float | None = None, act_credit: float = 0.0, max_steps: int = 30,
                 max_errors: int = 5, render_mode: str | None = None):
        super().__init__(domain=domain, max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        self.refuse_fraction = number("refuse_fraction", refuse_fraction)
        if unenforced_share is not None:
            unenforced_share = number("unenforced_share", unenforced_share)
        # default 0.7; a domain whose refusals are all unenforced (tau2-airline) realizes 1.0 only
        self.unenforced_share = self.domain_setting("unenforced_share", unenforced_share, 0.7)
        # below a bare refusal's 0.5
        self.act_credit = number("act_credit", act_credit, 0.0, 0.5, high_open=True)
        refusals = [c for c in self.domain.guard_cases if c != "allow"]
        self._unenforced = [c for c in refusals if c not in ENFORCED_CASES]
        self._enforced = [c for c in refusals if c in ENFORCED_CASES]

    @property
    def has_twins(self) -> bool:
        """The twin of an allowed request is a refusal case on the same world and kind, and back: exact on
        retail-sim only, whose every world hosts every case. A τ² domain redraws a world that cannot host the drawn
        case from the same rng, so a seed and its twin can land on other worlds and cases."""
        return self.domain_name == "retail-sim"

    def _draw_case(self, rng: np.random.Generator) -> str:
        if rng.random() >= self.refuse_fraction:
            return "allow"
        return self._draw_refusal(rng)

    def _draw_refusal(self, rng: np.random.Generator) -> str:
        pool = self._unenforced if (rng.random() < self.unenforced_share or not self._enforced) else self._enforced
        pool = pool or self._enforced
        return pool[int(rng.integers(len(pool)))]

    def build_task(self, world: Any, rng: np.random.Generator, options: dict[str, Any] | None) -> FamilyTask:
        kinds = self.domain.kinds("guarded")
        kind = kinds[int(rng.integers(len(kinds)))]
        case = self._draw_case(rng)
        if twin_requested(options):  # the same world and kind with the decision flipped
            case = self._draw_refusal(rng) if case == "allow" else "allow"
        if options and options.get("case"):
            case = str(options["case"])
        request = self.domain.guarded_request(world, rng, kind, case)
        difficulty = {"refuse_fraction": self.refuse_fraction, "unenforced_share": self.unenforced_share,
                      "act_credit": self.act_credit}
        return FamilyTask(case=case, requests=[request], difficulty=difficulty, hazards={"precondition": 1})

    def score_episode(self, episode: FamilyEpisode, transcript: list[dict[str, Any]]) -> Score:
        request = episode.requests[0]
        texts = assistant_texts(transcript)
        refused = any(is_refusal(t) for t in texts)
        db_ok = episode.db_matches_gold()
        if request.must_refuse:
            wrote = bool(episode.write_calls)
            lookups = episode.domain.lookup_calls(episode.world, episode.requests)
            read = checked_at(transcript, request, episode.domain.write_tools, identify=lookups[0] if lookups else None)
            grounded = [] if read is None else assistant_texts(transcript[read + 1:])  # what it said after reading
            refused_after = any(is_refusal(t) for t in grounded)
            explained = any(is_refusal(t) and refusal_explained(t, request) for t in grounded)
            reward = 0.0 if wrote or not db_ok else (1.0 if explained else 0.5 if refused_after else 0.0)
            breakdown = {"no_write": float(not wrote), "checked": float(read is not None),
                         "refused": float(refused_after), "explained": float(explained)}
        else:
            told = communicated(transcript, [request.entity_id])
            acted = _attempted_gold_write(episode, request)
            reward = (1.0 if told else 0.5) if db_ok else (self.act_credit if acted else 0.0)
            breakdown = {"db": float(db_ok), "communicate": float(told), "attempted": float(acted)}
        return Score(reward, reward == 1.0, breakdown, {"refused": refused})


def _attempted_gold_write(episode: FamilyEpisode, request: Any) -> bool:
    """Whether the agent called one of the request's gold write tools on the requested entity."""
    gold_tools = {name for name, _ in request.gold_actions}
    return any(call["name"] in gold_tools and request.entity_id in map(str, call["arguments"].values())
               for call in episode.write_calls)
