"""``trace/multi_step_task_completion-v0``: compound requests of 2-5 operations in one conversation.

Transfer rationale: the target's failures of this capability finish the first request and stop (or
drop later ones). Each episode opens with several allowed write requests, each on its own entity, all
stated at once; the agent must carry out every one. Dense reward = the required entities whose end state
matches the gold replay, over the required entities plus the stray writes (successful write calls that
name no requested entity), blended with the all-or-nothing ``success`` (the whole end state equals gold) by
``completion_weight`` (0: the dense fraction alone; 1: the paper-era env's all-or-nothing reward).

Why stray writes count: without them the dense reward never falls when the agent goes on past the last
request to change orders nobody asked about, so GRPO could learn to keep writing for free. Why the
completion weight: the shipped base mostly fails by skipping one request in the middle, which the dense
fraction pays (n - 1) / n (measured in docs/research_log.md, "Session 22").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.core.kwarg_checks import integer, number
from trace_envs.core.tool_env import Score
from trace_envs.families.base import FamilyEnv, FamilyEpisode, FamilyTask

MAX_OPS = 5


class MultiStepTaskCompletionEnv(FamilyEnv):
    """Difficulty knobs: ``min_ops`` / ``max_ops`` (2-5 operations per task, drawn uniformly); reward knob:
    ``completion_weight`` in [0, 1], the weight of all-or-nothing success against the dense fraction."""

    capability = "multi_step_task_completion"

    def __init__(self, domain: str = "retail-sim", min_ops: int = 2, max_ops: int = 3, max_steps: int = 40,
                 max_errors: int = 5, completion_weight: float = 0.0, render_mode: str | None = None):
        super().__init__(domain=domain, max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        self.min_ops = integer("min_ops", min_ops, 2, MAX_OPS)
        self.max_ops = integer("max_ops", max_ops, self.min_ops, MAX_OPS)
        self.completion_weight = number("completion_weight", completion_weight)

    def build_task(self, world: Any, rng: np.random.Generator, options: dict[str, Any] | None) -> FamilyTask:
        n_ops = int(rng.integers(self.min_ops, self.max_ops + 1))
        kinds = self.domain.kinds("plain")
        requests = [self.domain.plain_request(world, rng, kinds[int(rng.integers(len(kinds)))]) for _ in range(n_ops)]
        require_gold = getattr(self.domain, "require_gold", None)
        if require_gold is not None:  # each request's gold passed alone; together they may not (one gift card)
            require_gold(world, [action for r in requests for action in r.gold_actions])
        return FamilyTask(case=f"{n_ops}_ops", requests=requests,
                          difficulty={"min_ops": self.min_ops, "max_ops": self.max_ops, "n_ops": n_ops},
                          hazards={"multi_step": n_ops - 1})

    def score_episode(self, episode: FamilyEpisode, transcript: list[dict[str, Any]]) -> Score:
        domain = episode.domain
        final, gold = domain.entity_states(episode.db), domain.entity_states(episode.scoring_gold_db())
        keys = [domain.entity_key(r) for r in episode.requests]
        done = [final.get(k) == gold.get(k) for k in keys]
        stray = stray_writes(episode)
        dense = sum(done) / (len(keys) + stray)
        success = episode.db_matches_gold()
        reward = (1.0 - self.completion_weight) * dense + self.completion_weight * float(success)
        return Score(reward, success, {"fraction_done": sum(done) / len(keys), "db": float(success)},
                     {"ops_done": int(sum(done)), "ops_required": len(keys), "stray_writes": stray})


def stray_writes(episode: FamilyEpisode) -> int:
    """Successful write calls whose arguments name none of the episode's requested entities."""
    requested = {r.entity_id for r in episode.requests}
    return sum(1 for call in episode.write_calls
               if not call["error"] and not requested.intersection(_argument_strings(call["arguments"])))


def _argument_strings(arguments: Any) -> set[str]:
    if isinstance(arguments, str):
        return {arguments}
    values = arguments.values() if isinstance(arguments, dict) else arguments if isinstance(arguments, list) else ()
    return set().union(*(_argument_strings(v) for v in values))
