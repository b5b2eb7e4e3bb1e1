"""Thin helpers over ``torch.distributed`` (no-ops when it is not initialized)."""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist


def is_dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_dist() else 0


def world_size() -> int:
    return dist.get_world_size() if is_dist() else 1


def all_reduce_sum(value: float) -> float:
    """Sum a Python number over ranks."""
    if not is_dist():
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def all_gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order."""
    if not is_dist():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_grads(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum gradients over ranks (each rank's loss is already divided by the global normalizer)."""
    if not is_dist():
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def barrier() -> None:
    if is_dist():
        dist.barrier()
