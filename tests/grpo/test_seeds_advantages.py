import numpy as np
import pytest
import torch

from trace_train.grpo.advantages import group_advantages
from trace_train.grpo.seeds import env_seed, plan_iteration, sample_seed

torch.set_num_threads(1)


def test_group_members_share_env_seed_and_get_distinct_sampler_seeds():
    plan = plan_iteration(7, 3, groups=5, group_size=4, env_weights={"a": 1.0})
    assert [g.env_seed for g in plan] == [env_seed(7, 3, g) for g in range(5)]
    assert len({g.env_seed for g in plan}) == 5
    for g in plan:
        assert len(set(g.sample_seeds)) == 4
        assert g.sample_seeds == tuple(sample_seed(7, 3, g.group, m) for m in range(4))
    # deterministic, and different across iterations / run seeds
    assert plan == plan_iteration(7, 3, 5, 4, {"a": 1.0})
    assert plan_iteration(7, 4, 5, 4, {"a": 1.0})[0].env_seed != plan[0].env_seed
    assert plan_iteration(8, 3, 5, 4, {"a": 1.0})[0].env_seed != plan[0].env_seed


def test_env_mixture_follows_weights_and_does_not_move_env_seeds():
    weights = {"a": 3.0, "b": 1.0}
    plan = plan_iteration(0, 0, groups=4000, group_size=2, env_weights=weights)
    frac_a = np.mean([g.env_id == "a" for g in plan])
    assert abs(frac_a - 0.75) < 0.03
    single = plan_iteration(0, 0, groups=4000, group_size=2, env_weights={"a": 1.0})
    assert [g.env_seed for g in plan] == [g.env_seed for g in single]
    with pytest.raises(ValueError):
        plan_iteration(0, 0, 2, 2, {"a": 0.0})


def test_group_normalized_advantages_by_hand():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.2, 0.4, 0.6]
    adv = group_advantages(rewards, 4, std="group", eps=1e-6)
    g0 = np.array([1.0, 0, 0, 1.0])
    np.testing.assert_allclose(adv.values[:4], (g0 - 0.5) / (0.5 + 1e-6))
    g2 = np.array([0.0, 0.2, 0.4, 0.6])
    np.testing.assert_allclose(adv.values[8:], (g2 - g2.mean()) / (g2.std() + 1e-6))
    assert adv.constant_groups == 1 and adv.constant_fraction == pytest.approx(1 / 3)
    assert adv.keep.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    assert np.all(adv.values[4:8] == 0)


def test_batch_std_and_none_modes():
    rewards = np.array([1.0, 0.0, 3.0, 1.0])
    batch = group_advantages(rewards, 2, std="batch", eps=0.0)
    centred = np.array([0.5, -0.5, 1.0, -1.0])
    np.testing.assert_allclose(batch.values, centred / rewards.std())
    np.testing.assert_allclose(group_advantages(rewards, 2, std="none").values, centred)
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(rewards, 1)
    with pytest.raises(ValueError, match="do not split"):
        group_advantages(rewards, 3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_reward_is_refused_before_it_reaches_the_update(bad):
    """One NaN makes its group non-constant and every advantage of it NaN; the update would then write NaN into
    every adapter tensor. It is an error naming where it is instead."""
    with pytest.raises(ValueError, match=r"rewards must be finite numbers: .* at position 5 \(group 1"):
        group_advantages([0.0, 1.0, 0.0, 1.0, 0.0, bad, 1.0, 0.0], group_size=4)
