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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trace_envs.atomic_io import publish_dir
from trace_envs.records import write_json_atomic
from trace_train.grpo.config import LOGGING_KEYS
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


# grpo settings a resumed run may change: how long it runs and how it logs, not what it trains
RESUMABLE_CHANGES = frozenset({"iterations", "checkpoint_every", "threads"}) | LOGGING_KEYS


def check_resume_config(output_dir: str | os.PathLike, grpo: Mapping[str, Any], env: Any, *,
                        section: str = "grpo", identity: Mapping[str, Any] | None = None,
                        added_later: Mapping[str, Any] | None = None) -> None:
    """``ValueError`` when resuming in ``output_dir`` with other training settings than its ``config.json``
    records (the optimizer state would also bring back the old learning rate while config.json claimed the new
    one); a key a run made before it lacks is compared with its value in ``added_later`` (the default such a run
    trained with), and not compared when it has none there. ``section`` names the settings' block in
    config.json; ``identity`` holds the run's other recorded inputs (base model fingerprint, dtype, env kwargs,
    rollout options, adapters), each compared with config.json's top-level key of that name. A config.json made
    before one of them was recorded cannot say: the resume goes on, with a warning naming what was not checked."""
    path = Path(output_dir) / "config.json"
    if not path.exists():
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        before, saved_env = dict(saved.get(section) or {}), saved.get("env")
    except (json.JSONDecodeError, AttributeError, TypeError) as exc:
        raise ValueError(f"{path} is damaged ({exc}); delete {output_dir} to train from scratch") from None
    now = _as_json(dict(grpo))  # tuples as the saved JSON holds them
    if before:
        before = {**{k: v for k, v in _as_json(dict(added_later or {})).items() if k in now}, **before}
    changed = [f"{k}: {before[k]!r} -> {now[k]!r}" for k in sorted(set(before) & set(now))
               if k not in RESUMABLE_CHANGES and before[k] != now[k]]
    env_now = _as_json(env)
    if saved_env is not None and saved_env != env_now:
        changed.append(f"env: {saved_env!r} -> {env_now!r}")
    unchecked = []
    for key, value in _as_json(dict(identity or {})).items():
        if key not in saved:
            unchecked.append(key)
        elif saved[key] != value:
            changed.append(f"{key}: {_short(saved[key])} -> {_short(value)}")
    if changed:
        raise ValueError(f"resume=true in {output_dir}, which was trained with other settings ("
                         f"{'; '.join(changed[:6])}); resume with the settings of its config.json, or train into "
                         "a new output_dir")
    if unchecked:
        logger.warning("resuming in %s: its config.json predates recording %s, so they cannot be compared with "
                       "this run's; resume only onto the same ones", output_dir, ", ".join(unchecked))


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64:  # a fingerprint
        return value[:12] + "…"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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
