"""Spaces for text envs. Gymnasium's ``spaces.Text`` rejects punctuation, so we define our own."""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"
_ROLES = ("user", "tool", "system", "assistant")


class MessageText(Space[str]):
    """Any Python string up to ``max_length`` characters (the assistant's raw output); in shared memory a
    slot of ``4 * max_length`` UTF-8 bytes."""

    def __init__(self, max_length: int = 100_000, seed: int | np.random.Generator | None = None):
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, min(self.max_length, 200) + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"MessageText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageText) and other.max_length == self.max_length


class MessageList(Space[list]):
    """A list of chat messages (OpenAI dicts with a ``role`` and a string ``content``).

    Batching: a vector env batches these spaces as a ``Tuple``; ``AsyncVectorEnv``'s shared memory holds
    each env's observation as JSON in a slot of ``max_bytes`` (see ``trace_envs.core.space_memory``)."""

    def __init__(self, roles: Sequence[str] = _ROLES, seed: int | np.random.Generator | None = None,
                 max_bytes: int = 1 << 20):
        self.roles = tuple(roles)
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.max_bytes = max_bytes  # shared-memory slot size of one observation (JSON, UTF-8)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        text = MessageText(max_length=80, seed=int(self.np_random.integers(2**31)))
        role = self.roles[int(self.np_random.integers(len(self.roles)))]
        return [{"role": role, "content": text.sample()}]

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in self.roles and isinstance(m.get("content"), str) for m in x
        )

    def __repr__(self) -> str:
        return f"MessageList(roles={self.roles})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageList) and other.roles == self.roles
