"""Fixtures for model tests (the fake domain lives in ``tiny_domain.py``; ATOMIC and make_corpus are
re-exported here for older imports)."""

import pytest

from tests.model.tiny_domain import ATOMIC, make_corpus
from trace_train.model import build_tokenizer

__all__ = ["ATOMIC", "make_corpus"]


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(make_corpus(), ATOMIC, vocab_size=400, seed=0)
