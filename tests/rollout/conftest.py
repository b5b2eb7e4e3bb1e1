"""Rollout fixtures: a tiny tokenizer and an untrained tiny model (the fake env is in fake_tool_env.py)."""

from __future__ import annotations

import pytest
import torch

from tests.model.tiny_domain import ATOMIC, make_corpus
from trace_train.model import build_model, build_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(make_corpus(), ATOMIC, vocab_size=400, seed=0)


@pytest.fixture(scope="session")
def model(tokenizer):
    return build_model("tiny", tokenizer, seed=0)
