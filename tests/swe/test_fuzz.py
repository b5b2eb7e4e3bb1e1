"""Fuzz: malformed / hostile tool calls never raise out of ``step`` and keep the protocol intact."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_envs.core.parsing import format_tool_call
from trace_envs.swe.codeloc.env import CodeLocalizationEnv

_ENV: dict[str, CodeLocalizationEnv] = {}

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 50), st.floats(allow_nan=False, width=16),
                         st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6), inner, max_size=3), max_leaves=6)
paths = st.sampled_from(["", ".", "/", "..", "../x", "tests", "tests/__init__.py", "/testbed/tests", "a/b/c.py",
                         "\x00", "x" * 300]) | st.text(max_size=20)
editor_args = st.fixed_dictionaries(
    {"command": st.sampled_from(["view", "create", "str_replace", "insert", "undo_edit", "delete", ""]) | st.text(
        max_size=8), "path": paths},
    optional={"file_text": st.text(max_size=30) | json_scalars, "old_str": st.text(max_size=10) | json_scalars,
              "new_str": st.text(max_size=10), "insert_line": st.integers(-3, 40) | json_scalars,
              "view_range": st.lists(st.integers(-3, 40) | json_scalars, max_size=3) | json_scalars,
              "bogus": json_values})
# bash is left out on purpose: arbitrary shell text would run on this machine.
names = st.sampled_from(["str_replace_editor", "submit", "nope", "", "BASH", "transfer_to_human_agents"]) | st.text(
    max_size=10).filter(lambda n: n.strip() != "bash")
calls = st.one_of(
    editor_args.map(lambda a: format_tool_call("str_replace_editor", a)),
    st.tuples(names, st.dictionaries(st.text(max_size=8), json_values, max_size=3)).map(
        lambda t: format_tool_call(*t)),
    st.tuples(names, json_values).map(lambda t: "<tool_call>" + json.dumps({"name": t[0], "arguments": t[1]})),
    st.text(max_size=60).map(lambda s: f"<tool_call>{s}</tool_call>"),
    st.text(max_size=60),
    st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "arguments"]), json_values, max_size=4),
    st.builds(lambda f, a: {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": f,
                                                                                             "arguments": a}}]},
              names, st.text(max_size=20) | json_values),
)


def _env() -> CodeLocalizationEnv:
    if "env" not in _ENV:
        env = CodeLocalizationEnv(mode="localize", max_steps=10**6, max_errors=10**6, modules_per_layer=2,
                                  functions_per_module=2)
        env.reset(seed=0)
        _ENV["env"] = env
    return _ENV["env"]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(actions=st.lists(calls, min_size=1, max_size=3))
def test_malformed_calls_never_raise(actions):
    env = _env()
    space = env.observation_space
    for action in actions:
        if env._done:
            env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(action)
        assert space.contains(obs) and obs
        assert 0.0 <= reward <= 1.0
        if not (terminated or truncated):
            assert reward == 0.0
    # the workspace never escaped: nothing outside the repo was created by the editor
    assert env.episode.backend.ws.root.exists()


def test_zz_close_fuzz_env():
    env = _ENV.pop("env", None)
    if env is not None:
        env.close()
