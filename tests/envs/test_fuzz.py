"""Hypothesis fuzz: random, malformed and adversarial actions never raise out of step()."""

import json

import gymnasium as gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trace_envs  # noqa: F401
from trace_envs.retail_sim.tools import TOOL_DECLARATIONS

TOOL_NAMES = [name for name, *_ in TOOL_DECLARATIONS] + ["rm_rf", "", "calculate "]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


@st.composite
def actions(draw):
    kind = draw(st.sampled_from(["text", "call", "broken", "huge", "dict", "stop", "nested"]))
    if kind == "text":
        return draw(st.text(max_size=60))
    if kind == "call":
        args = draw(st.dictionaries(st.sampled_from(["order_id", "user_id", "email", "reason", "item_ids", "x",
                                                     "expression", "payment_method_id", "zip"]), json_values, max_size=4))
        payload = json.dumps({"name": draw(st.sampled_from(TOOL_NAMES)), "arguments": args}, allow_nan=True)
        return f"<tool_call>{payload}</tool_call>"
    if kind == "broken":
        return "<tool_call>" + draw(st.text(max_size=40)) + draw(st.sampled_from(["", "</tool_call>"]))
    if kind == "huge":
        return draw(st.sampled_from(["x", "<tool_call>", "{", "9"])) * draw(st.integers(1000, 50_000))
    if kind == "dict":
        return draw(st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "arguments"]),
                                    json_values, max_size=4))
    if kind == "stop":
        return "###STOP###"
    return '<tool_call>{"name": "calculate", "arguments": {"expression": "' + "(" * 300 + "1" + ")" * 300 + '"}}</tool_call>'


ACTIONS_RUN = {"count": 0}


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), episode=st.lists(actions(), min_size=10, max_size=14))
def test_no_exception_escapes_step(seed, episode):
    """Every action is stepped (episodes that end are reset), so >= 10,000 actions run in all."""
    env = gym.make("trace/retail-sim-v0", max_steps=10)
    env.reset(seed=seed)
    steps = 0
    for action in episode:
        obs, reward, terminated, truncated, info = env.step(action)
        ACTIONS_RUN["count"] += 1
        steps += 1
        assert env.observation_space.contains(obs)
        assert isinstance(reward, float)
        assert steps <= 10
        if steps == 10:
            assert terminated or truncated
        if terminated or truncated:
            assert "termination" in info
            env.reset(seed=seed + 1)
            steps = 0


def test_fuzz_volume():
    """Runs after the fuzz in file order: it must have stepped at least 10,000 actions."""
    if ACTIONS_RUN["count"] == 0:
        test_no_exception_escapes_step()
    assert ACTIONS_RUN["count"] >= 10_000
