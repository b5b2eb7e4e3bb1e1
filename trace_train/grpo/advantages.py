"""Group-relative advantages: (r − mean_group) / (std + ε), constant groups dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

StdMode = Literal["group", "batch", "none"]


@dataclass(frozen=True)
class Advantages:
    """Per-sample advantages (0 for dropped samples), the keep mask and group statistics."""

    values: np.ndarray  # float64, shape (groups * G,)
    keep: np.ndarray  # bool, shape (groups * G,): False for members of constant-reward groups
    constant_groups: int
    groups: int

    @property
    def constant_fraction(self) -> float:
        return self.constant_groups / self.groups if self.groups else 0.0


def group_advantages(
    rewards: np.ndarray | list[float],
    group_size: int,
    std: StdMode = "group",
    eps: float = 1e-6,
    constant_tol: float = 1e-8,
) -> Advantages:
    """Advantages for rewards laid out group after group (``len(rewards) == groups * group_size``).

    ``std``: ``"group"`` divides by the population std of the group (the paper), ``"batch"`` by the
    std of all rewards of the batch, ``"none"`` only centres. Groups whose rewards are all equal
    (spread ≤ ``constant_tol``) carry no signal: their samples get ``keep=False`` and advantage 0.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 for group-relative advantages, got {group_size}")
    if r.ndim != 1 or r.size % group_size:
        raise ValueError(f"{r.size} rewards do not split into groups of {group_size}")
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:  # one NaN would make its whole group's advantages NaN, and the update would poison the adapter
        raise ValueError(f"rewards must be finite numbers: {r[bad[0]]} at position {int(bad[0])} (group "
                         f"{int(bad[0]) // group_size}, {bad.size} in all); the env returned a non-finite reward")
    grouped = r.reshape(-1, group_size)
    centred = grouped - grouped.mean(axis=1, keepdims=True)
    constant = (grouped.max(axis=1) - grouped.min(axis=1)) <= constant_tol
    if std == "group":
        scale = grouped.std(axis=1, keepdims=True) + eps
    elif std == "batch":
        scale = np.full((grouped.shape[0], 1), r.std() + eps)
    elif std == "none":
        scale = np.ones((grouped.shape[0], 1))
    else:
        raise ValueError(f"unknown advantage std mode {std!r}; use 'group', 'batch' or 'none'")
    adv = centred / scale
    adv[constant] = 0.0
    keep = np.repeat(~constant, group_size)
    return Advantages(values=adv.reshape(-1), keep=keep, constant_groups=int(constant.sum()), groups=grouped.shape[0])
