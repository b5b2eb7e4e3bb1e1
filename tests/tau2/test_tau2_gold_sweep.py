"""Every task, real tau2 evaluator: gold replay scores 1.0 (bundled and head task files), head end
states match tau2's gold DB hashes, and a do-nothing agent scores 0 exactly where it must."""

from __future__ import annotations

import json

import pytest

from tests.tau2.conftest import requires_tau2
from tests.tau2.tau2_sweep import sweep
from trace_envs.tau2.tasks import load_task_set, reference_dir

pytestmark = [pytest.mark.tau2, requires_tau2]
N_TASKS = {"airline": 50, "retail": 114}


def fixture_hashes() -> dict:
    return json.loads((reference_dir() / "tau2_gold_db_hashes.json").read_text())["domains"]


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_gold_replay_bundled_tasks_all_score_one(domain):
    ids = list(load_task_set(domain, "bundled").tasks)
    assert len(ids) == N_TASKS[domain]
    out = sweep(domain, "bundled", "gold", ids)
    failed = {t: (o.reward, o.breakdown, o.termination) for t, o in out.items() if o.reward != 1.0}
    assert not failed
    assert all(o.termination == "user_stop" or o.termination == "transfer" for o in out.values())


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_gold_replay_head_tasks_score_one_and_match_gold_hashes(domain):
    expected = fixture_hashes()[domain]
    ids = list(load_task_set(domain, "head").tasks)
    assert sorted(ids) == sorted(expected["tasks"]) and len(ids) == N_TASKS[domain]
    out = sweep(domain, "head", "gold", ids)
    failed = {t: (o.reward, o.breakdown, o.termination) for t, o in out.items() if o.reward != 1.0}
    assert not failed
    wrong_hash = [t for t, o in out.items() if o.db_hash != expected["tasks"][t]["gold_db_hash"]]
    assert not wrong_hash
    # Retail HEAD tasks carry NL_ASSERTION: without a judge they are scored DB+COMMUNICATE and flagged.
    nl_tasks = {t for t, task in load_task_set(domain, "head").tasks.items()
                if "NL_ASSERTION" in [b.value for b in task.evaluation_criteria.reward_basis]}
    assert {t for t, o in out.items() if o.nl == "skipped_no_judge"} == nl_tasks
    assert (len(nl_tasks) == 112) if domain == "retail" else not nl_tasks


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_do_nothing_scores_zero_exactly_where_gold_changes_db_or_must_communicate(domain):
    expected = fixture_hashes()[domain]
    tasks = load_task_set(domain, "head").tasks
    out = sweep(domain, "head", "noop", list(tasks))
    must_act = {t for t, meta in expected["tasks"].items()
                if meta["changes_db"] or tasks[t].evaluation_criteria.communicate_info}
    zero = {t for t, o in out.items() if o.reward == 0.0}
    assert zero == must_act
    assert all(o.reward == 1.0 for t, o in out.items() if t not in must_act)
    assert all(o.db_hash == expected["initial"] for o in out.values())
