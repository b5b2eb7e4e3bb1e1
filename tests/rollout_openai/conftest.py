"""Fixtures: the tiny tokenizer/model of the hf backend tests, a fake server sampling from that model."""

from __future__ import annotations

import gymnasium as gym
import torch

from tests.rollout.conftest import model, tokenizer  # noqa: F401  (the hf backend tests' fixtures)
from tests.rollout.fake_tool_env import FakeToolEnv

torch.set_num_threads(1)

FAKE_ENV_ID = "trace_test/openai-fake-tool-v0"
if FAKE_ENV_ID not in gym.registry:
    gym.register(FAKE_ENV_ID, entry_point=FakeToolEnv, disable_env_checker=True)


