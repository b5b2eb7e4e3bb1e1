"""Fixtures: the tiny tokenizer/model of the hf backend tests, a fake server sampling from that model."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from tests.model.tiny_domain import ATOMIC, make_corpus
from tests.rollout.fake_tool_env import FakeToolEnv
from trace_train.model import build_model, build_tokenizer

torch.set_num_threads(1)

FAKE_ENV_ID = "trace_test/openai-fake-tool-v0"
if FAKE_ENV_ID not in gym.registry:
    gym.register(FAKE_ENV_ID, entry_point=FakeToolEnv, disable_env_checker=True)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(make_corpus(), ATOMIC, vocab_size=400, seed=0)


@pytest.fixture(scope="session")
def model(tokenizer):
    return build_model("tiny", tokenizer, seed=0)
