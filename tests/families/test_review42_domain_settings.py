"""Family settings a domain cannot honour are refused, the honoured ones are realized exactly (or the world is
redrawn), the calibration ladder steps only through honoured settings, the τ² domains draw a seed's tasks from
its own split's users, and the structured family refuses an unknown ``case`` option."""

import collections
import json
import logging
from dataclasses import replace

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from trace_envs.tau2.runtime import pristine_db, tau2_available

requires_tau2 = pytest.mark.skipif(not tau2_available(), reason="the real tau2 package is missing")
TAU2 = ("tau2-retail", "tau2-airline")
STRUCTURED = "trace/structured_data_reasoning-v0"
PRECONDITION = "trace/precondition_verification-v0"


@pytest.mark.parametrize("case", ["Question", "questoin", "", 1])
def test_an_unknown_structured_case_is_refused(case):
    env = gym.make(STRUCTURED)
    if case == "":  # no case given: the drawn one
        env.reset(seed=0, options={"case": case})
        return
    with pytest.raises(ValueError, match=r"unknown structured_data_reasoning case .*\['question', 'selection'\]"):
        env.reset(seed=0, options={"case": case})
    for known in ("question", "selection"):
        assert env.reset(seed=0, options={"case": known})[1]["task"]["case"] == known


def test_retail_sim_keeps_its_defaults():
    _, info = gym.make(STRUCTURED).reset(seed=0)
    assert info["task"]["difficulty"] == {"n_constraints": 2, "n_distractors": 2, "n_records": 3,
                                          "question_fraction": 0.3}
    _, info = gym.make(PRECONDITION).reset(seed=0)
    assert info["task"]["difficulty"]["unenforced_share"] == 0.7


@pytest.mark.tau2
@requires_tau2
@pytest.mark.parametrize("domain", TAU2)
@pytest.mark.parametrize("kwargs,match", [
    ({"n_distractors": 0}, "does not honour n_distractors"),
    ({"n_distractors": 2}, "does not honour n_distractors"),
    ({"n_records": 6}, "honours n_records in \\[2, [45]\\] only"),
])
def test_tau2_domains_refuse_settings_they_cannot_honour(domain, kwargs, match):
    with pytest.raises(ValueError, match=f"structured_data_reasoning: domain '{domain}' {match}"):
        gym.make(STRUCTURED, domain=domain, **kwargs)


@pytest.mark.tau2
@requires_tau2
@pytest.mark.parametrize("share", [0.0, 0.7])
def test_tau2_airline_refuses_an_enforced_share_it_has_no_case_for(share):
    with pytest.raises(ValueError, match="realizes only unenforced_share=1.0"):
        gym.make(PRECONDITION, domain="tau2-airline", unenforced_share=share)
    for kwargs in ({}, {"unenforced_share": 1.0}):
        _, info = gym.make(PRECONDITION, domain="tau2-airline", **kwargs).reset(seed=0)
        assert info["task"]["difficulty"]["unenforced_share"] == 1.0


@pytest.mark.tau2
@requires_tau2
@pytest.mark.parametrize("domain", TAU2)
def test_tau2_domains_realize_the_requested_records_and_constraints(domain):
    top = 5 if domain == "tau2-retail" else 4
    for n_records in (2, top):
        env = gym.make(STRUCTURED, domain=domain, n_records=n_records, question_fraction=1.0)
        for seed in (0, 1, 1_000_000):
            task = env.reset(seed=seed)[1]["task"]
            assert task["gold"]["requests"][0]["n_records"] == n_records
            assert task["hazards"] == {"structured": max(1, n_records - 2)}
            assert "n_distractors" not in task["difficulty"]
    env = gym.make(STRUCTURED, domain=domain, n_constraints=4, question_fraction=0.0)
    for seed in (0, 1, 1_000_000):
        task = env.reset(seed=seed)[1]["task"]
        assert len(task["gold"]["requests"][0]["constraints"]) == 4 and task["hazards"] == {"structured": 3}


@pytest.mark.tau2
@requires_tau2
def test_the_calibration_ladder_steps_through_honoured_settings_only(caplog):
    from trace_envs.synthesis import SynthesisConfig, search_knobs
    from trace_envs.synthesis.calibrate import domain_ladder
    from trace_envs.synthesis.config import SearchConfig

    ladder = [{"n_distractors": 0, "n_records": 3, "question_fraction": 1.0},
              {"n_distractors": 4, "n_records": 3, "question_fraction": 1.0},
              {"n_distractors": 2, "n_records": 8, "question_fraction": 1.0}]
    assert domain_ladder("structured_data_reasoning", "retail-sim", ladder) == ladder
    with caplog.at_level(logging.INFO, logger="trace_envs.synthesis.calibrate"):
        assert domain_ladder("structured_data_reasoning", "tau2-retail", ladder) == [
            {"n_records": 3, "question_fraction": 1.0}]
    assert "left out" in caplog.text and "skipped" in caplog.text and "tried once" in caplog.text
    with pytest.raises(ValueError, match="no calibration candidate"):
        domain_ladder("structured_data_reasoning", "tau2-airline", ladder[2:])
    cfg = replace(SynthesisConfig(), domain="tau2-airline", n_seeds=2, group_size=2,
                  search=SearchConfig(max_trials=3, candidates={"structured_data_reasoning": ladder}))
    result = search_knobs("structured_data_reasoning", cfg)  # runs: every trial's env is built
    assert [t.knobs for t in result.trials] == [{"n_records": 3, "question_fraction": 1.0}]


def _owners(domain, task):
    """The users whose records a τ² family task draws on: the acting user and every looked-up record's owner."""
    db = pristine_db(domain.removeprefix("tau2-"))
    owners = {task["user_id"]}
    for spec in task["requests"]:
        for name, args in [spec.get("lookup") or [None, {}], *spec.get("reads", [])]:
            if name == "get_order_details":
                owners.add(db.orders[args["order_id"]].user_id)
            elif name == "get_reservation_details":
                owners.add(db.reservations[args["reservation_id"]].user_id)
    return owners


@pytest.mark.tau2
@requires_tau2
@pytest.mark.parametrize("domain", TAU2)
def test_tau2_test_seeds_draw_only_on_the_test_pool(domain):
    from trace_envs.splits import pool_split

    splits = collections.Counter()
    for cap in ("precondition_verification", "tool_calling_precision", "structured_data_reasoning"):
        env = gym.make(f"trace/{cap}-v0", domain=domain)
        for split, seeds in (("train", range(8)), ("test", range(1_000_000, 1_000_008))):
            for seed in seeds:
                task = env.reset(seed=seed)[1]["task"]
                owners = _owners(domain, task)
                assert {pool_split(u) for u in owners} == {split}, (cap, seed, task["case"], owners)
                splits[split] += 1
    assert splits == {"train": 24, "test": 24}


def test_split_pools_are_stable_and_both_hold_users():
    from trace_envs.splits import pool_split, split_of

    assert split_of(0) == split_of(999_999) == split_of(None) == "train" and split_of(1_000_000) == "test"
    users = [f"user_{i}" for i in range(1000)]
    share = sum(pool_split(u) == "test" for u in users) / len(users)
    assert 0.15 < share < 0.25 and [pool_split(u) for u in users] == [pool_split(u) for u in users]
    assert json.dumps(pool_split("mia_li_3668"))  # a plain string


@pytest.mark.tau2
@requires_tau2
def test_a_redrawn_world_keeps_the_drawn_case():
    """A world that cannot host the drawn case (few airline users have a 3-flight reservation) is redrawn for that
    same case: the case is the seed's first draw after its first world, so the mix stays question_fraction."""
    from gymnasium.utils import seeding

    from trace_envs.domains import get_domain

    domain = get_domain("tau2-airline")
    env = gym.make(STRUCTURED, domain="tau2-airline", n_records=3, question_fraction=0.5)
    for seed in range(30):
        rng, _ = seeding.np_random(seed)
        domain.new_world(rng)
        drawn = "question" if rng.random() < 0.5 else "selection"
        assert env.reset(seed=seed)[1]["task"]["case"] == drawn, seed
