"""Paired comparisons of two policies on the same episodes: McNemar's exact test and a paired bootstrap."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mcnemar_exact(base: Sequence[bool], other: Sequence[bool]) -> tuple[int, int, float]:
    """Discordant counts (b: base only, c: other only) and the two-sided exact binomial p-value."""
    if len(base) != len(other):
        raise ValueError(f"paired outcomes differ in length: {len(base)} vs {len(other)}")
    b = sum(1 for x, y in zip(base, other) if x and not y)
    c = sum(1 for x, y in zip(base, other) if y and not x)
    n = b + c
    if n == 0:
        return b, c, 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return b, c, min(1.0, 2 * tail)


def paired_bootstrap(base: Sequence[float], other: Sequence[float], n_boot: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """Mean difference ``other - base`` with a 95 % percentile interval, resampling the paired units."""
    if len(base) != len(other) or not base:
        raise ValueError(f"paired bootstrap needs equal, non-empty samples ({len(base)} vs {len(other)})")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    diff = np.asarray(other, dtype=float) - np.asarray(base, dtype=float)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)
