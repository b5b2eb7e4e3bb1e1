"""Degenerate model output never raises out of ``step`` in any tool-use env (issue 24): nesting past the
recursion limit, integer literals past Python's int/str digit limit, lone surrogates. Each is an error
observation the agent sees; the episode goes on, or truncates on the error budget."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from tests.tau2.conftest import requires_tau2
from trace_envs.core.parsing import MAX_JSON_DEPTH
from trace_train.trajectory import TrajectoryRecord, read_trajectories, write_trajectories

TAU2 = [pytest.mark.tau2, requires_tau2]
ENV_IDS = [
    "trace/retail-sim-v0",
    "trace/precondition_verification-v0",
    "trace/structured_data_reasoning-v0",
    "trace/multi_step_task_completion-v0",
    "trace/tool_calling_precision-v0",
    pytest.param("trace/tau2-airline-v0", marks=TAU2),
    pytest.param("trace/tau2-retail-v0", marks=TAU2),
]

NESTED = "[" * 1000 + "]" * 1000  # 2,000 characters, 1,000 levels
DIGITS = "9" * 5000


def deep_actions(tool: str) -> list:
    """The 1,000-level nesting in every path that decodes model JSON, and as a Python object."""
    value: list = []
    for _ in range(1000):
        value = [value]
    return [
        f'<tool_call>{{"name": "{tool}", "arguments": {{"x": {NESTED}}}}}</tool_call>',
        f"<tool_call>{NESTED}</tool_call>",
        f'{{"name": "{tool}", "arguments": {{"x": {NESTED}}}}}',
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": tool, "arguments": NESTED}}]},
        {"name": tool, "arguments": {"x": value}},
    ]


def big_int_actions(tool: str) -> list:
    return [
        f'<tool_call>{{"name": "{tool}", "arguments": {{"x": {DIGITS}}}}}</tool_call>',
        f'{{"name": "{tool}", "arguments": {{"x": -{DIGITS}}}}}',
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": tool, "arguments": f'{{"x": {DIGITS}}}'}}]},
        {"name": tool, "arguments": {"x": 10 ** 5000}},
    ]


@pytest.fixture(params=ENV_IDS)
def env(request):
    env = gym.make(request.param)
    obs, info = env.reset(seed=3)
    env.first_tool = info["tools"][0]["function"]["name"]
    yield env
    env.close()


def step_ok(env, action):
    """Step; the action gives exactly one error tool message and nothing escapes."""
    errors_before = env.unwrapped._errors
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs) and isinstance(reward, float)
    errors = [m for m in obs if m["role"] == "tool" and m["content"].startswith("Error:")]
    assert errors, obs
    assert info["format_ok"] is False and env.unwrapped._errors > errors_before
    return obs, terminated, truncated, info


def test_deep_nesting_is_an_error_observation(env):
    assert len(deep_actions(env.first_tool)[0]) > 2000
    for action in deep_actions(env.first_tool):
        obs, terminated, truncated, info = step_ok(env, action)
        assert any(f"nests deeper than {MAX_JSON_DEPTH} levels" in m["content"] for m in obs), obs
        if terminated or truncated:  # the error budget ends it, as for any malformed call
            assert truncated and info["termination"] == "too_many_errors" and info["reward"] == 0.0
            env.reset(seed=3)


def test_too_long_integer_literal_is_an_error_observation(env):
    for action in big_int_actions(env.first_tool):
        obs, terminated, truncated, info = step_ok(env, action)
        assert any("too many digits" in m["content"] for m in obs), obs
        if terminated or truncated:
            assert info["termination"] == "too_many_errors"
            env.reset(seed=3)


def test_repeated_hostile_calls_truncate_on_the_error_budget(env):
    action = deep_actions(env.first_tool)[0]
    for _ in range(env.unwrapped.max_errors - 1):
        _, terminated, truncated, _ = step_ok(env, action)
        assert not (terminated or truncated)
    _, terminated, truncated, info = step_ok(env, action)
    assert truncated and not terminated and info["termination"] == "too_many_errors"


@pytest.mark.parametrize("form", ["escaped", "raw", "dict", "text"])
def test_lone_surrogate_is_replaced_reported_and_writable(env, form, tmp_path):
    tool = env.first_tool
    if form == "escaped":  # a JSON \ud800 escape: json.loads makes it a lone surrogate
        action = f'<tool_call>{{"name": "{tool}", "arguments": {{"x": "a\\ud800b"}}}}</tool_call>'
    elif form == "raw":
        action = f'<tool_call>{{"name": "{tool}", "arguments": {{"x": "a\ud800b"}}}}</tool_call>'
    elif form == "dict":
        action = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": tool,
                                                                                  "arguments": {"x": "a\ud800b"}}}]}
    else:
        action = "Could you tell me more\udc80?"
    obs, terminated, truncated, info = step_ok(env, action)
    assert any("lone UTF-16 surrogates" in m["content"] for m in obs)
    transcript = env.unwrapped.transcript
    assistant = transcript[-1 - len(obs)]
    assert assistant["role"] == "assistant"
    if form == "text":
        assert assistant["content"] == "Could you tell me more\ufffd?"
    else:
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"x": "a\ufffdb"}
    # The project's JSONL writer takes the episode as it is, and reads it back unchanged.
    json.dumps(transcript, ensure_ascii=False).encode("utf-8")
    record = TrajectoryRecord(env_id=env.spec.id, seed=3, messages=transcript, reward=0.0, success=False,
                              termination="test")
    path = write_trajectories(tmp_path / "t.jsonl", [record])
    assert read_trajectories(path)[0].messages == transcript


TAU2_DOMAIN_ENVS = [pytest.param(env_id, kwargs, marks=TAU2) for env_id, kwargs in [
    ("trace/tau2-airline-v0", {}), ("trace/tau2-retail-v0", {}),
    # the capability families on τ² domains run the same tau2 tools
    ("trace/structured_data_reasoning-v0", {"domain": "tau2-retail"}),
    ("trace/precondition_verification-v0", {"domain": "tau2-airline"}),
    ("trace/multi_step_task_completion-v0", {"domain": "tau2-retail"}),
    ("trace/tool_calling_precision-v0", {"domain": "tau2-airline"})]]


@pytest.mark.parametrize("env_id,kwargs", TAU2_DOMAIN_ENVS)
def test_tau2_calculate_refuses_exponents(env_id, kwargs):
    """tau2's calculate ``eval``s: ``9**9**9`` would stall the step and the evaluator's replay for minutes.
    ``**`` is refused before the call enters the transcript; plain arithmetic still runs in tau2."""
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    obs, *_ = env.step('<tool_call>{"name": "calculate", "arguments": {"expression": "9**9**9"}}</tool_call>')
    assert [m["name"] for m in obs] == ["invalid_tool_call"] and "no **" in obs[0]["content"]
    assert "tool_calls" not in env.unwrapped.transcript[-2]  # the evaluator never replays it
    obs, *_ = env.step('<tool_call>{"name": "calculate", "arguments": {"expression": "2 * (3 + 4)"}}</tool_call>')
    assert obs[0]["name"] == "calculate" and obs[0]["content"] == "14.0"
    _, reward, terminated, _, info = env.step("Goodbye ###STOP###")
    assert terminated and info["termination"] == "agent_stop" and reward == 0.0
