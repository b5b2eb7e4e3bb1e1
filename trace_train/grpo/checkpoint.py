"""Atomic training checkpoints: adapter + optimizer + RNG states + iteration.

Layout under the run's output dir::

    checkpoints/iter_0004/{adapter/, optimizer.pt, state.pt}
    checkpoints/latest.json      # {"name": "iter_0004", "iteration": 4}

A checkpoint is written into a temp dir and renamed into place, then ``latest.json`` is replaced
atomically, so a crash leaves either the previous or the new checkpoint, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trace_envs.atomic_io import publish_dir
from trace_envs.records import write_json_atomic
from trace_train.grpo.lora import load_adapter_weights, save_adapter

logger = logging.getLogger(__name__)


def write_checkpoint(output_dir: str | os.PathLike, iteration: int, write: Callable[[Path], None]) -> Path:
    """Publish ``checkpoints/iter_<iteration>`` (filled by ``write(tmp_dir)``) atomically, then point
    ``latest.json`` at it; returns the checkpoint dir. Shared by the adapter trainer and gate-only GRPO."""
    root = Path(output_dir) / "checkpoints"
    final = publish_dir(root / f"iter_{iteration:04d}", write)
    write_json_atomic(root / "latest.json", {"name": final.name, "iteration": iteration})
    logger.info("checkpoint %s written", final)
    return final


def save_checkpoint(
    output_dir: str | os.PathLike,
    iteration: int,
    model: torch.nn.Module,
    adapter: str,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Save the state after ``iteration`` completed iterations; returns the checkpoint dir."""

    def write(tmp: Path) -> None:
        save_adapter(model, adapter, tmp / "adapter")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        state = {"iteration": iteration, "adapter": adapter, "torch_rng": torch.get_rng_state(),
                 "numpy_rng": np.random.get_state(), "extra": extra or {}}
        torch.save(state, tmp / "state.pt")

    return write_checkpoint(output_dir, iteration, write)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``latest.json`` points to, or None; a damaged pointer or a missing checkpoint is a
    ``ValueError`` that names the file."""
    pointer = Path(output_dir) / "checkpoints" / "latest.json"
    if not pointer.exists():
        return None
    try:
        name = json.loads(pointer.read_text(encoding="utf-8"))["name"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{pointer} is damaged ({type(exc).__name__}: {exc}); it should read "
                         '{"name": "iter_NNNN", "iteration": N}') from exc
    path = pointer.parent / str(name)
    if not path.is_dir():
        raise ValueError(f"{pointer} points to missing checkpoint {path}")
    return path


def checkpoint_adapter(path: str | os.PathLike) -> str:
    """The adapter name a checkpoint was saved for."""
    return str(torch.load(Path(path) / "state.pt", weights_only=False)["adapter"])


def check_resumable(output_dir: str | os.PathLike, adapter: str) -> Path | None:
    """The checkpoint a resumed run of ``adapter`` in ``output_dir`` would start from (None: it starts fresh);
    ``ValueError`` when the pointer is damaged or the checkpoint belongs to another adapter."""
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is not None and (saved := checkpoint_adapter(checkpoint)) != adapter:
        raise ValueError(f"checkpoint {checkpoint} is for adapter {saved!r}, not {adapter!r}")
    return checkpoint


def load_checkpoint(
    path: str | os.PathLike, model: torch.nn.Module, adapter: str, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restore adapter weights, optimizer and RNG states; return the saved state (``iteration`` etc.)."""
    path = Path(path)
    state = torch.load(path / "state.pt", weights_only=False)
    if state["adapter"] != adapter:
        raise ValueError(f"checkpoint {path} is for adapter {state['adapter']!r}, not {adapter!r}")
    load_adapter_weights(model, adapter, path / "adapter")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    torch.set_rng_state(state["torch_rng"])
    np.random.set_state(state["numpy_rng"])
    return state
