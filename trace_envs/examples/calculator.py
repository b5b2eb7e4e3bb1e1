"""A calculator tool env: the README's "bring your own env" example, kept runnable by the tests.

``trace-rl rollout env=trace_envs.examples.calculator:my/calc-v0`` imports this module, which
registers ``my/calc-v0``. The user asks for ``a * b + c``; the agent may call ``multiply``/``add``
and must state the result; ``info['task']['required_capabilities']`` feeds per-capability metrics.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from trace_envs.core import Episode, Score, ToolBox, ToolSpec, ToolUseEnv, UserReply

NUM = {"type": "number"}
BINARY = {"type": "object", "properties": {"a": NUM, "b": NUM}, "required": ["a", "b"]}


class CalcEpisode(Episode):
    def __init__(self, a: int, b: int, c: int):
        self.answer = a * b + c
        self.system_prompt = "You are a calculator assistant. Use the tools, then state the result."
        self.tools = ToolBox.of([ToolSpec("multiply", "a * b", BINARY, lambda a, b: a * b),
                                 ToolSpec("add", "a + b", BINARY, lambda a, b: a + b)])
        self.task_info = {"question": f"{a} * {b} + {c}", "answer": self.answer,
                          "required_capabilities": ["arithmetic"]}

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"What is {self.task_info['question']}?"}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return UserReply("Thanks! ###STOP###", stop=True)  # one answer per episode

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        said = " ".join(m["content"] for m in transcript if m["role"] == "assistant")
        ok = str(self.answer) in said.replace(",", "")
        return Score(reward=float(ok), success=ok, breakdown={"answer": float(ok)})


class CalculatorEnv(ToolUseEnv):
    def __init__(self, max_value: int = 20, **kwargs: Any):
        super().__init__(**kwargs)
        self.max_value = max_value

    def _new_episode(self, options: dict[str, Any] | None) -> CalcEpisode:
        a, b, c = (int(x) for x in self.np_random.integers(1, self.max_value + 1, size=3))
        return CalcEpisode(a, b, c)


if "my/calc-v0" not in gym.registry:
    gym.register("my/calc-v0", entry_point=CalculatorEnv, max_episode_steps=None)
