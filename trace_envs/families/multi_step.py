"""``trace/multi_step_task_completion-v0``: compound requests of 2-5 operations in one conversation.

Transfer rationale: the target's failures of this capability finish the first request and stop (or
drop later ones). Each episode opens with several allowed write requests, each on its own entity, all
stated at once; the agent must carry out every one. Dense reward = fraction of the required entity
state changes that match the gold replay; ``success`` = the whole end state equals gold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.core.tool_env import Score
from trace_envs.families.base import FamilyEnv, FamilyEpisode, FamilyTask

MAX_OPS = 5


class MultiStepTaskCompletionEnv(FamilyEnv):
    """Difficulty knobs: ``min_ops`` / ``max_ops`` (2-5 operations per task, drawn uniformly)."""

    capability = "multi_step_task_completion"

    def __init__(self, domain: str = "retail-sim", min_ops: int = 2, max_ops: int = 3, max_steps: int = 40,
                 max_errors: int = 5, render_mode: str | None = None):
        super().__init__(domain=domain, max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        if not 2 <= min_ops <= max_ops <= MAX_OPS:
            raise ValueError(f"need 2 <= min_ops <= max_ops <= {MAX_OPS}, got {min_ops}, {max_ops}")
        self.min_ops, self.max_ops = int(min_ops), int(max_ops)

    def build_task(self, world: Any, rng: np.random.Generator, options: dict[str, Any] | None) -> FamilyTask:
        n_ops = int(rng.integers(self.min_ops, self.max_ops + 1))
        kinds = self.domain.kinds("plain")
        requests = [self.domain.plain_request(world, rng, kinds[int(rng.integers(len(kinds)))]) for _ in range(n_ops)]
        return FamilyTask(case=f"{n_ops}_ops", requests=requests,
                          difficulty={"min_ops": self.min_ops, "max_ops": self.max_ops, "n_ops": n_ops},
                          hazards={"multi_step": n_ops - 1})

    def score_episode(self, episode: FamilyEpisode, transcript: list[dict[str, Any]]) -> Score:
        domain = episode.domain
        final, gold = domain.entity_states(episode.db), domain.entity_states(episode.gold_db)
        keys = [domain.entity_key(r) for r in episode.requests]
        done = [final.get(k) == gold.get(k) for k in keys]
        reward = sum(done) / len(keys)
        success = episode.db_matches_gold()
        return Score(reward, success, {"fraction_done": reward, "db": float(success)},
                     {"ops_done": int(sum(done)), "ops_required": len(keys)})
