"""The programmatic labeler recovers exactly the deficits injected into retail-sim's scripted expert."""

from __future__ import annotations

import pytest

from tests.analysis.retail_data import expert_records
from trace_envs.retail_sim import ExpertKnobs
from trace_envs.retail_sim.experts import KNOB_TO_CAPABILITY
from trace_train.analysis.aggregate import aggregate
from trace_train.analysis.labels import Label
from trace_train.analysis.probes import ProgrammaticLabeler, capabilities_for, detect_domain
from trace_train.analysis.run import success_map

REAL = sorted(KNOB_TO_CAPABILITY.values())
DISTRACTORS = {"politeness", "asks_for_confirmation", "transfer_when_stuck"}


def clean_labels(records):
    caps = capabilities_for("retail_sim")
    return caps, ProgrammaticLabeler(caps, noise_rate=0.0).clean_labels(records)


def test_domain_detection_and_probe_set():
    records = expert_records(ExpertKnobs(), range(3))
    assert detect_domain(records) == "retail_sim"
    names = {c.name for c in capabilities_for("retail_sim")}
    assert names == set(REAL) | DISTRACTORS


def test_oracle_is_never_lacking_on_a_real_capability():
    records = expert_records(ExpertKnobs(), range(60))
    assert all(r.success for r in records)
    _, labels = clean_labels(records)
    for r in records:
        required = set(r.info["task"]["required_capabilities"])
        for cap in REAL:
            assert labels[(r.episode_id, cap)] is (Label.PRESENT if cap in required else Label.NA)


@pytest.mark.parametrize("knob", sorted(KNOB_TO_CAPABILITY))
def test_each_knob_at_one_explains_exactly_the_failures(knob):
    records = expert_records(ExpertKnobs(**{knob: 1.0}), range(80))
    target = KNOB_TO_CAPABILITY[knob]
    _, labels = clean_labels(records)
    failed = {r.episode_id for r in records if not r.success}
    lacking = {r.episode_id for r in records if labels[(r.episode_id, target)] is Label.LACKING}
    assert failed and lacking == failed
    for r in records:
        for cap in REAL:
            if cap != target:
                assert labels[(r.episode_id, cap)] is not Label.LACKING, (cap, r.episode_id)


def _select(knobs: ExpertKnobs, n: int = 300, seed: int = 0) -> tuple[set[str], dict]:
    records = expert_records(knobs, range(n))
    caps = capabilities_for("retail_sim")
    runs = ProgrammaticLabeler(caps, noise_rate=0.05, seed=seed).label(records, 10)
    result = aggregate(runs, caps, success_map(records))
    return {c.name for c in result.selected}, {c.name: c for c in result.candidates}


def test_all_four_knobs_select_exactly_the_four_deficits():
    selected, cands = _select(ExpertKnobs(precondition=0.5, structured=0.5, multi_step=0.5, precision=0.5))
    assert selected == set(REAL)
    assert all(cands[d].n_runs_passed == 0 for d in DISTRACTORS)


@pytest.mark.parametrize("knobs", [("precondition", "precision"), ("structured", "multi_step")])
def test_two_knobs_select_only_those_two(knobs):
    selected, cands = _select(ExpertKnobs(**{k: 0.5 for k in knobs}), seed=7)
    assert selected == {KNOB_TO_CAPABILITY[k] for k in knobs}
    assert all(cands[d].n_runs_passed == 0 for d in DISTRACTORS)
