"""``trace/structured_data_reasoning-v0``: pick the right record among distractors, or compute a value.

Transfer rationale: the target's failures of this capability pick a record that matches only part of
the user's constraints (a variant of the right colour above the price bound, the wrong rank) or
answer with one row instead of an aggregate. Each episode is one request on the domain's tools:
either a selection under ``n_constraints`` constraints with ``n_distractors`` tempting decoys
(reward 1 iff the end state equals the gold write, i.e. the exact id was chosen), or a question over
``n_records`` records (reward 1 iff the exact value is told to the user and nothing was written).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_envs.core.communication import communicated
from trace_envs.core.kwarg_checks import integer, number
from trace_envs.core.tool_env import Score
from trace_envs.families.base import FamilyEnv, FamilyEpisode, FamilyTask

CASES = ("question", "selection")


class StructuredDataReasoningEnv(FamilyEnv):
    """Difficulty knobs: ``n_constraints`` (2-4), ``n_distractors`` (0-4, default 2), ``n_records`` (2-8),
    ``question_fraction`` (share of value questions vs selections), ``selection_style`` (one of the domain's
    ``selection_styles``: ``mixed`` draws the constraints at random; retail-sim's ``price_bound`` is the shape
    of its own exchanges, the over-budget variant of the right colour listed first). A domain may honour a
    narrower range or not vary a knob (``Domain.setting_ranges`` / ``fixed_settings``: the τ² domains' selections
    are among the DB's own records, so ``n_distractors`` stays unset there); another value is a ``ValueError``."""

    capability = "structured_data_reasoning"

    def __init__(self, domain: str = "retail-sim", n_constraints: int = 2, n_distractors: int | None = None,
                 n_records: int = 3, question_fraction: float = 0.3, selection_style: str = "mixed",
                 max_steps: int = 30, max_errors: int = 5, render_mode: str | None = None):
        super().__init__(domain=domain, max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        if selection_style not in self.domain.selection_styles:
            raise ValueError(f"selection_style must be one of {self.domain.selection_styles} on domain "
                             f"{self.domain.name!r}, got {selection_style!r}")
        self.n_constraints = self.domain_setting("n_constraints", integer("n_constraints", n_constraints, 2, 4), 2)
        if n_distractors is not None:
            n_distractors = integer("n_distractors", n_distractors, 0, 4)
        self.n_distractors = self.domain_setting("n_distractors", n_distractors, 2)
        self.n_records = self.domain_setting("n_records", integer("n_records", n_records, 2, 8), 3)
        self.question_fraction = number("question_fraction", question_fraction)
        if selection_style == "price_bound" and self.n_constraints != 2:
            raise ValueError(f"price_bound selections have 2 constraints (colour, price bound); got "
                             f"n_constraints={self.n_constraints}")
        self.selection_style = selection_style
        self._case: str | None = None  # the episode's drawn case, kept while worlds are redrawn for it

    def _new_episode(self, options: dict[str, Any] | None) -> FamilyEpisode:
        self._case = None
        return super()._new_episode(options)

    def build_task(self, world: Any, rng: np.random.Generator, options: dict[str, Any] | None) -> FamilyTask:
        # A world that cannot host the case (a τ² user without an order of n_records items) is redrawn for the
        # same case: drawing the case again would skew the mix away from question_fraction.
        if self._case is None:
            self._case = "question" if rng.random() < self.question_fraction else "selection"
        case = self._case
        if options and options.get("case"):
            case = options["case"]
            if case not in CASES:
                raise ValueError(f"unknown structured_data_reasoning case {case!r}; choose one of {list(CASES)}")
        # hazards come from the request drawn; the domains draw exactly the knobs' values (or redraw)
        if case == "question":
            request = self.domain.question_request(world, rng, self.n_records)
            hazard = max(1, int(request.details["n_records"]) - 2)
        else:
            kinds = self.domain.kinds("selection")
            kind = kinds[int(rng.integers(len(kinds)))]
            request = self.domain.selection_request(world, rng, kind, self.n_constraints, self.n_distractors,
                                                    style=self.selection_style)
            hazard = len(request.details["constraints"]) - 1
        difficulty = {"n_constraints": self.n_constraints, "n_distractors": self.n_distractors,
                      "n_records": self.n_records, "question_fraction": self.question_fraction}
        if self.n_distractors is None:  # a domain that does not vary it
            del difficulty["n_distractors"]
        if self.selection_style != "mixed":  # named only when set: the default's episodes stay bit for bit
            difficulty["selection_style"] = self.selection_style
        return FamilyTask(case=case, requests=[request], difficulty=difficulty, hazards={"structured": hazard})

    def score_episode(self, episode: FamilyEpisode, transcript: list[dict[str, Any]]) -> Score:
        request = episode.requests[0]
        db_ok = episode.db_matches_gold()
        if episode.task.case == "question":
            told = communicated(transcript, request.communicate)
            reward = float(db_ok and told)
            return Score(reward, reward == 1.0, {"db": float(db_ok), "answer": float(told)})
        reward = float(db_ok)
        return Score(reward, db_ok, {"db": reward}, {"chosen_ok": db_ok})
