"""A tiny fake tool env: tool calls get a tool message, text gets a user reply."""

import json

import gymnasium as gym

from tests.model.tiny_domain import SYSTEM, TOOLS


class FakeToolEnv(gym.Env):
    """Answers tool calls with a tool message and text with a user reply; ends after ``turns`` steps."""

    def __init__(self, turns: int = 3):
        self.turns = turns
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        order = f"#W{1234567 + int(self.np_random.integers(0, 3)) * 1111111}"
        return [{"role": "user", "content": f"Cancel order {order} please."}], {"tools": TOOLS, "system_prompt": SYSTEM}

    def step(self, action):
        self._t += 1
        if "<tool_call>" in action:
            obs = [{"role": "tool", "tool_call_id": f"call_{self._t}", "name": "get_order_details",
                    "content": json.dumps({"status": "pending", "n": self._t})}]
        else:
            obs = [{"role": "user", "content": f"reply {self._t} to {len(action)} chars"}]
        done = self._t >= self.turns
        info = {"format_ok": True}
        if done:
            info.update(success=self._t % 2 == 1, termination="user_stop", reward_breakdown={"db": 1.0},
                        format_valid_fraction=1.0)
        return obs, (1.0 if done else 0.0), done, False, info


def fake_factory(env_id, **kwargs):
    assert env_id == "fake/tool-v0"
    return FakeToolEnv(**kwargs)
