"""Torch intra-op threads in one place: what a config asks for, under this process's cap.

A pipeline worker (:mod:`trace_train.workers`) caps its process at one thread, so a stage whose config says
``threads: 2`` runs on one core there while another worker uses the other; everywhere else the cap is unset and a
config's thread count is taken as it is.
"""

from __future__ import annotations

import torch

_cap: int | None = None


def cap_torch_threads(n: int) -> None:
    """From now on this process runs torch on at most ``n`` threads, whatever a config asks for."""
    global _cap
    if n < 1:
        raise ValueError(f"a thread cap must be >= 1, got {n}")
    _cap = n
    torch.set_num_threads(n)


def torch_threads(requested: int) -> int:
    """The thread count a config's ``requested`` (>= 1) becomes in this process."""
    return min(requested, _cap) if _cap is not None else requested


def set_torch_threads(requested: int) -> None:
    """``torch.set_num_threads`` of ``requested`` under the cap (a no-op when torch already runs that many)."""
    n = torch_threads(requested)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
