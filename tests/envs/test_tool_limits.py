"""Tool results and echoes that would outgrow what the env can return: numbers too large for Python, huge
agent-chosen names, oversized tool output, and agent-chosen call ids that collide with the env's own."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
import trace_envs.examples.calculator  # noqa: F401  (registers my/calc-v0)
from trace_envs.core import Episode, Score, ToolBox, ToolSpec, ToolUseEnv, UserReply
from trace_envs.core.parsing import NAME_ECHO_CHARS, format_tool_call
from trace_envs.core.tool_env import MAX_TOOL_MESSAGE_CHARS

BIG = "9" * 3000  # under the parser's ~3,900-digit limit; its square is not


def call(name: str, args: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


@pytest.mark.parametrize("args, why", [
    (f'{{"a": {BIG}, "b": {BIG}}}', "more than 4300 digits"),  # the product cannot be written as JSON
    (f'{{"a": {BIG}, "b": 1.5}}', "too large to convert to float"),  # OverflowError inside the tool
])
def test_numbers_too_large_for_python_are_an_error_observation(args, why):
    env = gym.make("my/calc-v0").unwrapped
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(call("multiply", args))
    assert not (terminated or truncated) and info["errors"] == 1
    assert obs[0]["content"].startswith("Error: multiply: a number is too large") and why in obs[0]["content"]
    obs, *_ = env.step(call("multiply", '{"a": 6, "b": 7}'))
    assert obs[0]["content"] == "42"


def test_a_bug_in_a_tool_still_raises():
    """Only ``ToolError`` and Python's huge-number limits are the agent's doing; anything else is the tool's bug."""
    box = ToolBox.of([ToolSpec("lookup", "", {"type": "object", "properties": {}}, lambda: {}["missing"]),
                      ToolSpec("setish", "", {"type": "object", "properties": {}}, lambda: {1, 2})])
    with pytest.raises(KeyError):
        box.call("lookup", {})
    with pytest.raises(TypeError):  # a result that is not JSON
        box.call("setish", {})


def test_huge_unknown_tool_name_is_echoed_short():
    name = "\U000e0001" * 99_000  # repr() writes each as 10 characters
    env = gym.make("trace/retail-sim-v0").unwrapped
    env.reset(seed=0)
    obs, *_ = env.step(call(name, "{}"))
    (msg,) = obs
    assert msg["name"] == name[:NAME_ECHO_CHARS] + "..."
    assert msg["content"].startswith("Error: unknown tool " + repr(name[:NAME_ECHO_CHARS] + "..."))
    assert len(json.dumps(obs, ensure_ascii=False).encode()) < 10_000


def test_unknown_argument_names_are_echoed_short():
    env = gym.make("my/calc-v0").unwrapped
    env.reset(seed=0)
    key = "k" * 50_000
    obs, *_ = env.step(call("add", f'{{"a": 1, "b": 2, "{key}": 3}}'))
    assert obs[0]["content"] == f"Error: unknown argument(s) {'k' * NAME_ECHO_CHARS}... for add"


class _EchoEpisode(Episode):
    def __init__(self) -> None:
        self.system_prompt = "echo"
        self.tools = ToolBox.of([ToolSpec("echo", "text * n", {
            "type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["text", "n"]}, lambda text, n: text * n)])
        self.task_info: dict[str, Any] = {}

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "echo something"}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return UserReply("ok ###STOP###", stop=True)

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        return Score(reward=0.0, success=False)


class _EchoEnv(ToolUseEnv):
    def _new_episode(self, options: dict[str, Any] | None) -> Episode:
        return _EchoEpisode()


@pytest.mark.parametrize("n, cut", [(MAX_TOOL_MESSAGE_CHARS, False), (MAX_TOOL_MESSAGE_CHARS + 1, True),
                                    (1_000_000, True)])
def test_tool_message_content_is_capped(n, cut):
    env = _EchoEnv()
    env.reset(seed=0)
    obs, *_ = env.step(format_tool_call("echo", {"text": "\U0001f600", "n": n}))
    content = obs[0]["content"]
    assert len(content) <= MAX_TOOL_MESSAGE_CHARS
    if cut:
        assert content.startswith("\U0001f600" * 1000)
        assert content.endswith(f"characters cut: a tool message holds at most {MAX_TOOL_MESSAGE_CHARS:,}]")
    else:
        assert content == "\U0001f600" * n
    assert env.transcript[-1] == obs[0]  # the agent's context holds exactly what the observation held


def test_env_call_ids_never_equal_an_agent_chosen_id():
    env = gym.make("my/calc-v0").unwrapped
    env.reset(seed=0)
    chosen = '<tool_call>{"id": "call_1", "function": {"name": "add", "arguments": {"a": 1, "b": 1}}}</tool_call>'
    obs, *_ = env.step(chosen + '\n<tool_call>{"name": "add", "arguments": </tool_call>')
    error, result = obs
    assert (result["tool_call_id"], result["content"]) == ("call_1", "2")
    assert error["name"] == "invalid_tool_call" and error["tool_call_id"] not in ("", "call_1")
    ids = [error["tool_call_id"], result["tool_call_id"]]
    # a later turn's env ids skip every id the agent chose so far, too
    chosen = '<tool_call>{"id": "call_4", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}</tool_call>'
    obs, *_ = env.step(chosen + "\n" + format_tool_call("add", {"a": 1, "b": 2}) * 2)
    ids += [m["tool_call_id"] for m in obs]
    assert len(set(ids)) == len(ids) == 5
    assert [c["id"] for c in env.transcript[-4]["tool_calls"]] == [m["tool_call_id"] for m in obs]


def test_env_call_ids_without_agent_ids_are_numbered_through_the_episode():
    env = gym.make("my/calc-v0").unwrapped
    env.reset(seed=0)
    ids = []
    for _ in range(2):
        obs, *_ = env.step(format_tool_call("add", {"a": 1, "b": 2}) + '<tool_call>{"name": "add"</tool_call>')
        ids += [m["tool_call_id"] for m in obs]
    assert ids == ["call_1", "call_2", "call_3", "call_4"]


def test_a_turn_runs_at_most_max_calls_and_many_calls_fit_the_vector_slot():
    from trace_envs.core.tool_env import MAX_CALLS_PER_TURN

    env = gym.make("trace/retail-sim-v0").unwrapped
    env.reset(seed=0)
    obs, *_ = env.step(call("x", "{}") * (MAX_CALLS_PER_TURN + 10))
    assert len(obs) == MAX_CALLS_PER_TURN
    assert "11 tool calls of this turn were not run" in obs[0]["content"]
    # ~900 unknown calls with 60 astral characters each: the step's messages share the slot
    unit = call("\U000E0001" * 60, "{}")
    venv = gym.make_vec("trace/retail-sim-v0", num_envs=2, vectorization_mode="async")
    try:
        venv.reset(seed=0)
        observations, *_ = venv.step((unit * (100_000 // len(unit)), "hello?"))
        assert len(observations[0]) == MAX_CALLS_PER_TURN
    finally:
        venv.close(terminate=True)


def test_tool_messages_of_one_step_are_cut_to_share_the_observation_limit():
    turn = call("list_all_product_types", "{}") * 20
    env = gym.make("trace/retail-sim-v0").unwrapped
    env.reset(seed=0)
    full, *_ = env.step(turn)
    size = len(json.dumps(full, ensure_ascii=False).encode("utf-8"))
    env = gym.make("trace/retail-sim-v0").unwrapped
    env.observation_space.max_bytes = limit = size * 4 // 5  # a slot smaller than this step's messages
    env.reset(seed=0)
    obs, *_ = env.step(turn)
    assert len(json.dumps(obs, ensure_ascii=False).encode("utf-8")) <= limit
    assert all("share the observation's size limit" in m["content"] for m in obs)
    heads = [m["content"].split("\n... [")[0] for m in obs]
    assert all(head and f["content"].startswith(head) for head, f in zip(heads, full))  # each keeps its head
