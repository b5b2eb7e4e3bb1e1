import math

import pytest

from trace_train.evaluation import pass_hat_k, summarize, wilson_interval
from trace_train.trajectory import TrajectoryRecord


def test_wilson_matches_hand_computation():
    # p = 0.8, n = 10, z = 1.96: centre = (0.8 + 0.19208) / 1.38416, half = 1.96*sqrt(0.016 + 0.0009604)/1.38416
    low, high = wilson_interval(8, 10)
    centre = (0.8 + 1.96**2 / 20) / (1 + 1.96**2 / 10)
    half = 1.96 * math.sqrt(0.8 * 0.2 / 10 + 1.96**2 / 400) / (1 + 1.96**2 / 10)
    assert low == pytest.approx(centre - half) and high == pytest.approx(centre + half)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    # none or all solved: the bound on that side is exactly 0 or 1 (the formula left 2.8e-17 at 0 of 11)
    for n in (1, 11, 500, 1999):
        assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0
        assert 0.0 < wilson_interval(0, n)[1] < 1.0 and 0.0 < wilson_interval(n, n)[0] < 1.0


def test_pass_hat_k_hand_example():
    trials = {"a": [True, True, False, True], "b": [False, False, True, False]}
    # a: C(3,2)/C(4,2) = 3/6; b: C(1,2) = 0 -> mean 0.25
    assert pass_hat_k(trials, 2) == pytest.approx(0.25)
    assert pass_hat_k(trials, 1) == pytest.approx((3 / 4 + 1 / 4) / 2)
    with pytest.raises(ValueError):
        pass_hat_k(trials, 5)


def _rec(seed, success, caps):
    return TrajectoryRecord(env_id="e", seed=seed, messages=[], reward=float(success), success=success,
                            termination="user_stop", policy="p", info={"task": {"required_capabilities": caps}})


def test_summary_per_capability_and_pass_k():
    records = [_rec(1, True, ["a"]), _rec(1, False, ["a"]), _rec(2, True, ["a", "b"]), _rec(2, True, ["a", "b"]),
               _rec(3, False, []), _rec(3, False, [])]
    s = summarize(records, policy="p")
    assert s.overall.successes == 3 and s.overall.n == 6
    assert s.per_capability["a"].successes == 3 and s.per_capability["a"].n == 4
    assert s.per_capability["b"].rate == 1.0 and s.per_capability["(none)"].rate == 0.0
    # pass^2 per task: seed1 0/1, seed2 1, seed3 0 -> 1/3
    assert s.pass_k[2] == pytest.approx(1 / 3)
    assert s.to_dict()["overall"]["n"] == 6


def test_trials_of_one_task_count_as_one_task_in_the_interval():
    # every task's two trials agree: the 40 episodes carry the information of 20 tasks
    agreeing = [_rec(seed, seed % 4 == 0, []) for seed in range(20) for _ in range(2)]
    s = summarize(agreeing)
    assert s.overall.n == 40 and s.overall.effective_n == pytest.approx(20)
    assert s.overall.interval == pytest.approx(wilson_interval(5, 20))
    assert s.overall.interval[1] - s.overall.interval[0] > wilson_interval(10, 40)[1] - wilson_interval(10, 40)[0]
    assert s.to_dict()["overall"]["effective_n"] == pytest.approx(20)
    assert s.per_capability["(none)"].interval == pytest.approx(wilson_interval(5, 20))
    # trials that disagree as independent draws would: about as wide as the plain interval (kept <= n)
    mixed = [_rec(seed, t == seed % 2, []) for seed in range(20) for t in range(2)]
    m = summarize(mixed).overall
    assert m.rate == 0.5 and m.effective_n == pytest.approx(40)
    assert m.interval == pytest.approx(wilson_interval(20, 40))
    # nothing solved: the bound uses the number of tasks, not of episodes
    none = summarize([_rec(seed, False, []) for seed in range(10) for _ in range(3)]).overall
    assert none.interval == pytest.approx(wilson_interval(0, 10))
    # one trial per task: the plain interval, and the dict is what it was
    single = summarize([_rec(seed, seed < 3, []) for seed in range(10)]).overall
    assert single.effective_n is None and single.interval == wilson_interval(3, 10)
    assert "effective_n" not in single.to_dict()


def test_summary_pools_id_argument_validity_when_the_env_reports_it():
    a, b = _rec(1, True, []), _rec(2, False, [])
    a.info.update(id_args_total=4, id_args_valid=4)
    b.info.update(id_args_total=6, id_args_valid=1)
    s = summarize([a, b]).to_dict()
    assert s["id_args_valid"]["successes"] == 5 and s["id_args_valid"]["n"] == 10
    assert summarize([_rec(3, True, [])]).id_args_valid is None  # envs without an id ledger
