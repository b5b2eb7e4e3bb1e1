"""A bad ``gym.make`` kwarg is a one-line ``ValueError`` naming it, at construction: not a ``TypeError`` at the
first step, not a silently truncated value, not an env that plays (and rewards) a task with no requests."""

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from trace_envs.splits import split_seeds

BAD = [
    ("trace/retail-sim-v0", {"max_steps": 0}, "max_steps"),
    ("trace/retail-sim-v0", {"max_steps": "10"}, "max_steps"),
    ("trace/retail-sim-v0", {"max_errors": 0}, "max_errors"),
    ("trace/retail-sim-v0", {"n_intents": -1}, "n_intents"),
    ("trace/retail-sim-v0", {"n_intents": 0}, "n_intents"),
    ("trace/retail-sim-v0", {"n_intents": "2"}, "n_intents"),
    ("trace/retail-sim-v0", {"kinds": ["bogus"]}, "kinds"),
    ("trace/retail-sim-v0", {"kinds": "cancel"}, "kinds"),
    ("trace/retail-sim-v0", {"kinds": []}, "kinds"),
    ("trace/retail-sim-v0", {"gift_card_rate": "0.5"}, "gift_card_rate"),
    ("trace/precondition_verification-v0", {"refuse_fraction": "0.5"}, "refuse_fraction"),
    ("trace/precondition_verification-v0", {"act_credit": None}, "act_credit"),
    ("trace/precondition_verification-v0", {"act_credit": 0.5}, "act_credit"),
    ("trace/precondition_verification-v0", {"max_steps": -3}, "max_steps"),
    ("trace/structured_data_reasoning-v0", {"n_constraints": 2.5}, "n_constraints"),
    ("trace/structured_data_reasoning-v0", {"n_records": "3"}, "n_records"),
    ("trace/structured_data_reasoning-v0", {"question_fraction": float("nan")}, "question_fraction"),
    ("trace/structured_data_reasoning-v0", {"selection_style": "price_bound", "n_constraints": 3}, "price_bound"),
    ("trace/multi_step_task_completion-v0", {"min_ops": 2.5, "max_ops": 3}, "min_ops"),
    ("trace/multi_step_task_completion-v0", {"min_ops": 3, "max_ops": 2}, "max_ops"),
    ("trace/multi_step_task_completion-v0", {"max_ops": "3"}, "max_ops"),
    ("trace/tool_calling_precision-v0", {"request_kinds": "cancel"}, "request_kinds"),
    ("trace/tool_calling_precision-v0", {"request_kinds": 5}, "request_kinds"),
    ("trace/tool_calling_precision-v0", {"perturb_prob": float("nan")}, "perturb_prob"),
]


@pytest.mark.parametrize("env_id,kwargs,named", BAD)
def test_bad_kwargs_are_refused_at_construction(env_id, kwargs, named):
    with pytest.raises(ValueError, match=named):
        gym.make(env_id, **kwargs)


@pytest.mark.parametrize("env_id,kwargs", [
    ("trace/retail-sim-v0", {"max_steps": 1, "max_errors": 1, "n_intents": 2.0, "kinds": ["cancel", "return"]}),
    ("trace/structured_data_reasoning-v0", {"n_constraints": 4, "n_distractors": 0, "question_fraction": 1}),
    ("trace/multi_step_task_completion-v0", {"min_ops": 2, "max_ops": 2}),
    ("trace/tool_calling_precision-v0", {"request_kinds": ("cancel",), "perturb_prob": 0}),
])
def test_edge_values_still_make_a_playable_env(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    *_, info = env.step("hello")
    assert info["steps"] == 1


def test_one_error_truncates_at_max_errors_one_and_one_turn_at_max_steps_one():
    env = gym.make("trace/retail-sim-v0", max_errors=1)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step('<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>')
    assert truncated and not terminated and info["termination"] == "too_many_errors"
    env = gym.make("trace/retail-sim-v0", max_steps=1)
    env.reset(seed=0)
    _, _, _, truncated, info = env.step("Hello, how can I help?")
    assert truncated and info["termination"] == "max_steps" and info["errors"] == 0


@pytest.mark.parametrize("n,offset", [(-1, 0), (2.5, 0), (1, -1), ("3", 0), (True, 0)])
def test_split_seeds_refuses_counts_that_are_not_natural_numbers(n, offset):
    with pytest.raises(ValueError, match="non-negative integer"):
        split_seeds("train", n, offset)


@pytest.mark.parametrize("kwargs,named", [({"n_intents": 8}, "n_intents must be in \\[1, 7\\]"),
                                          ({"n_intents": 3, "kinds": ["cancel"]}, "n_intents=3 but kinds lists 1"),
                                          ({"kinds": ["cancel"] * 8}, "at most 7")])
def test_retail_sim_task_sizes_a_world_cannot_hold_are_refused(kwargs, named):
    """A world holds 8 orders: 8 requests crashed reset on half the seeds; n_intents beside kinds was ignored."""
    with pytest.raises(ValueError, match=named):
        gym.make("trace/retail-sim-v0", **kwargs)


def test_editing_the_reset_info_does_not_edit_the_gold():
    """``info['task']`` is the caller's: changing its gold actions must not change what the episode is scored
    against (a cancel with the reason the user did not give stays wrong)."""
    from trace_envs.core.parsing import format_tool_call

    env = gym.make("trace/retail-sim-v0", n_intents=1, kinds=["cancel"])
    seed = next(s for s in range(100) if env.reset(seed=s)[1]["task"]["intents"][0]["eligible"])
    _, info = env.reset(seed=seed)
    gold = info["task"]["gold_actions"][0][1]
    wrong = "no longer needed" if gold["reason"] == "ordered by mistake" else "ordered by mistake"
    gold["reason"] = wrong
    order_id = info["task"]["intents"][0]["order_id"]
    env.step(format_tool_call("cancel_pending_order", {"order_id": order_id, "reason": wrong}))
    _, reward, *_ = env.step("Done ###STOP###")
    assert reward == 0.0
