"""Decision outcomes on real retail-sim episodes of the scripted expert: each knob at 1 makes exactly its own
capability's reached decisions wrong, the oracle gets every one right, and an unreached decision is not counted."""

from __future__ import annotations

import copy

import pytest

from tests.analysis.retail_data import expert_records
from trace_envs.retail_sim import ExpertKnobs
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB
from trace_train.analysis.retail_decisions import CAPABILITIES, decision_outcomes, tally_decisions

SEEDS = range(200, 320)


def test_the_oracle_reaches_every_decision_and_gets_each_right():
    tallies = tally_decisions(expert_records(ExpertKnobs(), SEEDS))
    for cap in CAPABILITIES:
        assert tallies[cap].reached >= 5, cap
        assert tallies[cap].wrong == 0 and tallies[cap].rate == 1.0, cap


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_a_knob_at_one_makes_exactly_its_own_decisions_wrong(capability):
    knobs = ExpertKnobs(**{CAPABILITY_TO_KNOB[capability]: 1.0})
    tallies = tally_decisions(expert_records(knobs, SEEDS))
    assert tallies[capability].reached >= 5 and tallies[capability].right == 0
    for other in CAPABILITIES:
        if other != capability:
            assert tallies[other].wrong == 0, other


def test_a_knob_between_gives_a_rate_between():
    rate = tally_decisions(expert_records(ExpertKnobs(precision=0.5), SEEDS))["tool_calling_precision"].rate
    assert 0.2 < rate < 0.8


def test_decisions_the_agent_never_reached_are_not_counted():
    record = next(r for r in expert_records(ExpertKnobs(), SEEDS)
                  if any(i.get("ineligible_reason") == "ownership" for i in r.info["task"]["intents"]))
    assert decision_outcomes(record)["precondition_verification"].right >= 1
    opening_only = copy.deepcopy(record)
    opening_only.messages = [m for m in record.messages if m["role"] in ("system", "user")][:2]
    outcomes = decision_outcomes(opening_only)
    assert all(t.reached == 0 for t in outcomes.values())
