"""Counterfactual twin groups (``grpo.twin_groups``): pairs of groups on one env seed, the second playing the env's
twin of the first's task (the same world and request kind, the decision flipped)."""

import gymnasium as gym
import pytest
import torch
from grpo_configs import small_grpo_config

import trace_envs  # noqa: F401
from trace_envs.tau2.runtime import tau2_available
from trace_envs.twins import envs_without_twins, twin_requested
from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.config import ADDED_LATER
from trace_train.grpo.seeds import plan_iteration
from trace_train.model.factory import load_policy
from trace_train.paths import REPO_ROOT
from trace_train.rollout.base import EpisodeRequest
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.trajectory import read_trajectories

torch.set_num_threads(1)

SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"
PRECONDITION = "trace/precondition_verification-v0"


def test_twin_groups_pair_env_seeds_and_leave_every_other_draw_alone():
    envs = {PRECONDITION: 1.0, "trace/multi_step_task_completion-v0": 1.0}
    plain = plan_iteration(3, 7, 8, 4, envs, 0.5)
    twins = plan_iteration(3, 7, 8, 4, envs, 0.5, twin_groups=True)
    for g, (p, t) in enumerate(zip(plain, twins)):
        first = plain[g - g % 2]
        assert (t.env_id, t.env_seed) == (first.env_id, first.env_seed)  # the pair's first group's task
        assert t.twin == (g % 2 == 1)
        assert (t.sample_seeds, t.hinted) == (p.sample_seeds, p.hinted)  # sampling and hints stay per group
    assert len({t.env_seed for t in twins}) == 4
    assert all(not p.twin for p in plain)
    with pytest.raises(ValueError, match="pairs"):
        plan_iteration(3, 7, 5, 4, envs, twin_groups=True)
    with pytest.raises(ValueError, match="even groups_per_iter"):
        GRPOConfig(groups_per_iter=3, twin_groups=True).validate()


def test_the_key_stays_out_of_the_hashes_of_runs_that_do_not_set_it():
    assert ADDED_LATER["twin_groups"] is False
    assert "twin_groups" not in GRPOConfig().hash_part()
    assert GRPOConfig(twin_groups=True).hash_part()["twin_groups"] is True


def test_a_request_resets_with_the_options_it_asks_for():
    assert EpisodeRequest("e", 1).reset_options() is None
    assert EpisodeRequest("e", 1, hint=True).reset_options() == {"hint": True}
    assert EpisodeRequest("e", 1, twin=True).reset_options() == {"twin": True}
    assert EpisodeRequest("e", 1, hint=True, twin=True).reset_options() == {"hint": True, "twin": True}


def test_the_precondition_twin_flips_the_decision_on_the_same_world_and_kind():
    env = gym.make(PRECONDITION)
    flipped_to = set()
    for seed in range(40):
        _, first = env.reset(seed=seed)
        _, twin = env.reset(seed=seed, options={"twin": True})
        _, again = env.reset(seed=seed, options={"twin": True})
        a, b = first["task"], twin["task"]
        assert "twin" not in first and twin["twin"] is True
        assert b == again["task"]  # a twin is a pure function of the seed
        assert (a["user_id"], a["intents"][0]["kind"]) == (b["user_id"], b["intents"][0]["kind"])
        assert (a["case"] == "allow") != (b["case"] == "allow")  # exactly one of the two must be refused
        flipped_to.add(b["case"])
    assert flipped_to == {"allow", "ownership", "status"}  # a refusal twin follows the env's refusal mix
    with pytest.raises(ValueError, match="'twin' must be a bool"):
        twin_requested({"twin": "yes"})


def test_envs_without_twins_are_named_and_refused_before_any_work(tmp_path):
    assert envs_without_twins([PRECONDITION, "trace/structured_data_reasoning-v0", "trace/retail-sim-v0"], {}) == [
        "trace/structured_data_reasoning-v0", "trace/retail-sim-v0"]
    with pytest.raises(ValueError, match="no counterfactual twin"):
        gym.make("trace/structured_data_reasoning-v0").reset(seed=0, options={"twin": True})
    model, tok = load_policy(SHIPPED)
    with pytest.raises(ValueError, match="has no counterfactual twin"):
        GRPOTrainer(model, lambda m: HFRolloutBackend(m, tok), _config(twin_groups=True),
                    env="trace/retail-sim-v0", adapter="cap", output_dir=tmp_path)
    assert not (tmp_path / "config.json").exists()


def _config(**kw):
    return small_grpo_config(**{"groups_per_iter": 4, "group_size": 2, "max_new_tokens": 48, **kw})


def test_the_trainer_plays_each_pair_as_a_task_and_its_twin(tmp_path):
    model, tok = load_policy(SHIPPED)
    trainer = GRPOTrainer(model, lambda m: HFRolloutBackend(m, tok, max_turns=3), _config(twin_groups=True),
                          env=PRECONDITION, adapter="cap", output_dir=tmp_path)
    trainer.train()
    records = read_trajectories(tmp_path / "rollouts" / "iter_0000.jsonl")
    by_group: dict[int, list] = {}
    for record in records:
        by_group.setdefault(record.info["group"], []).append(record)
    assert sorted(by_group) == [0, 1, 2, 3]
    env = gym.make(PRECONDITION)
    for first, second in ((0, 1), (2, 3)):
        seeds = {r.seed for r in by_group[first] + by_group[second]}
        assert len(seeds) == 1  # one env seed per pair
        cases = {g: {r.info["task"]["case"] for r in by_group[g]} for g in (first, second)}
        assert all(len(c) == 1 for c in cases.values())  # every member of a group plays one task
        (a,), (b,) = cases[first], cases[second]
        assert (a == "allow") != (b == "allow")
        _, expected = env.reset(seed=seeds.pop(), options={"twin": True})
        assert b == expected["task"]["case"]


@pytest.mark.skipif(not tau2_available(), reason="the real tau2 package is missing")
@pytest.mark.parametrize("domain", ["tau2-retail", "tau2-airline"])
def test_a_tau2_domain_has_no_exact_twins_and_says_so(domain):
    # a τ² domain redraws a world that cannot host the drawn case, so a seed and its "twin" could differ in more
    # than the decision (tau2-retail seed 3: another customer's order on both sides)
    assert envs_without_twins([PRECONDITION], {"domain": domain}) == [PRECONDITION]
