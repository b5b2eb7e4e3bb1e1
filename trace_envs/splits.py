"""Seed splits shared by every trace env: train seeds and held-out test seeds never overlap.

Envs that draw their worlds from a fixed database (the families on the τ² domains) also split what they draw
from (:func:`pool_split`), and a seed draws from its own split's pool (:func:`split_of`): otherwise distinct
seeds would replay the same task across the split.
"""

from __future__ import annotations

import hashlib
import numbers

SPLITS: dict[str, range] = {"train": range(1_000_000), "test": range(1_000_000, 1_100_000)}


def split_seeds(split: str, n: int, offset: int = 0) -> list[int]:
    """The ``n`` seeds of a named split (``train`` or ``test``) starting at ``offset`` within it."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(SPLITS)}")
    for name, value in (("n", n), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    seeds = SPLITS[split]
    if offset < 0 or offset + n > len(seeds):
        raise ValueError(f"split {split!r} holds {len(seeds)} seeds; asked for {n} at offset {offset}")
    return list(seeds[int(offset): int(offset) + int(n)])


TEST_POOL_SHARE = 0.2  # the share of a fixed database's records (users) set aside for the test seeds


def split_of(seed: int | None) -> str:
    """The split whose pool a seed draws from: ``test`` for the test seeds, ``train`` for every other seed
    (``None`` included)."""
    return "test" if seed is not None and int(seed) in SPLITS["test"] else "train"


def pool_split(key: str) -> str:
    """The split a fixed database's record ``key`` (a user id) belongs to, by a stable hash of the key."""
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return "test" if digest / 2 ** 64 < TEST_POOL_SHARE else "train"
