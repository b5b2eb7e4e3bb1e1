"""Seed splits shared by every trace env: train seeds and held-out test seeds never overlap."""

from __future__ import annotations

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
