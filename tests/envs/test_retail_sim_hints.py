"""Hints on the retail-sim target and a scripted expert that reads them."""

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from trace_envs.hints import CAPABILITY_HINTS, with_hint
from trace_envs.retail_sim import ExpertKnobs, ScriptedExpert
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB


def _play(env, expert, seed, options=None):
    obs, info = env.reset(seed=seed, options=options)
    expert.reset(obs, info, seed=seed)
    while True:
        obs, reward, terminated, truncated, step = env.step(expert.act(obs))
        if terminated or truncated:
            return info, reward


def test_a_hint_names_one_required_capability_and_leaves_the_task_unchanged():
    env = gym.make("trace/retail-sim-v0")
    seen, unhinted_tasks = set(), 0
    for seed in range(60):
        obs_h, info_h = env.reset(seed=seed, options={"hint": True})
        obs, info = env.reset(seed=seed)
        assert obs_h == obs and info_h["task"] == info["task"] and info["hint"] is None
        required = info["task"]["required_capabilities"]
        if not required:
            assert info_h["hint"] is None and info_h["system_prompt"] == info["system_prompt"]
            unhinted_tasks += 1
            continue
        capability = info_h["hint_capability"]
        assert capability in required and info_h["hint"] == CAPABILITY_HINTS[capability]
        assert info_h["system_prompt"] == with_hint(info["system_prompt"], info_h["hint"])
        assert info_h["unhinted_system_prompt"] == info["system_prompt"]
        assert env.reset(seed=seed, options={"hint": True})[1]["hint_capability"] == capability  # deterministic
        seen.add(capability)
    assert unhinted_tasks > 0 and len(seen) == 4


@pytest.mark.parametrize("capability", sorted(CAPABILITY_TO_KNOB))
def test_an_expert_that_always_reads_the_hint_does_not_fail_the_hinted_capability(capability):
    env = gym.make("trace/retail-sim-v0")
    knob = CAPABILITY_TO_KNOB[capability]
    checked = 0
    for seed in range(400):
        _, info = env.reset(seed=seed, options={"hint": True})
        if info["task"]["required_capabilities"] != [capability] or info["hint_capability"] != capability:
            continue
        lacking = ExpertKnobs(**{knob: 1.0})
        _, plain = _play(env, ScriptedExpert(lacking, seed=seed), seed)
        _, reading = _play(env, ScriptedExpert(lacking, seed=seed, hint_uptake=1.0), seed, {"hint": True})
        _, ignoring = _play(env, ScriptedExpert(lacking, seed=seed, hint_uptake=0.0), seed, {"hint": True})
        assert plain == ignoring == 0.0 and reading == 1.0
        checked += 1
        if checked == 3:
            break
    assert checked > 0
