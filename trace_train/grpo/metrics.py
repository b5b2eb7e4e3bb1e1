"""Per-iteration metrics: one log line and one JSONL row always, TensorBoard when installed, and the
experiment trackers asked for (``grpo.trackers=[wandb]`` / ``[trackio]``), which must then be installed."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trace_envs.records import append_jsonl

logger = logging.getLogger(__name__)

TRACKERS = ("wandb", "trackio")
_LOG_KEYS = ("reward_mean", "success_rate", "env_reward_mean", "constant_group_fraction", "loss", "clip_frac",
             "trained_samples", "time_rollout_s", "time_update_s")


def check_trackers(trackers: Sequence[str]) -> None:
    """``ValueError`` naming the fix if a tracker is unknown or not installed (nothing is started)."""
    for name in trackers:
        if name not in TRACKERS:
            raise ValueError(f"trackers: unknown tracker {name!r}; choose from {', '.join(TRACKERS)}")
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"trackers: {name} was asked for but is not installed ({exc}); "
                             f"`pip install {name}` or drop it from grpo.trackers") from exc


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def format_line(iteration: int, metrics: dict[str, Any]) -> str:
    """``iter 3: reward_mean=0.412 success_rate=0.375 ...``: the headline scalars first, then the rest."""
    scalars = _scalars(metrics)
    order = [k for k in _LOG_KEYS if k in scalars] + sorted(k for k in scalars if k not in _LOG_KEYS)
    return f"iter {iteration}: " + " ".join(f"{k}={scalars[k]:.4g}" for k in order)


class MetricsLogger:
    """Appends one JSON object per iteration to ``metrics.jsonl``, logs it as one line, and sends the
    scalars to TensorBoard (``tb/``) and to each requested tracker.

    ``purge_step`` (a resumed run: the iteration it resumes from) hides the TensorBoard points an earlier process
    logged from that iteration on, which the resumed run logs again."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = True, trackers: Sequence[str] = (),
                 project: str = "trace-rl", run_name: str | None = None, config: dict[str, Any] | None = None,
                 purge_step: int | None = None) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(log_dir=str(Path(output_dir) / "tb"), purge_step=purge_step)
            except ImportError:
                logger.info("tensorboard not installed; metrics go to %s only", self.path)
        check_trackers(trackers)
        self.trackers: list[tuple[str, Any]] = []
        for name in trackers:
            module = importlib.import_module(name)
            if name == "wandb":
                run = module.init(project=project, name=run_name, config=config, dir=str(output_dir))
                self.trackers.append((name, run))
            else:  # trackio: module-level init/log/finish
                module.init(project=project, name=run_name, config=config)
                self.trackers.append((name, module))
            logger.info("logging metrics to %s (project %s, run %s)", name, project, run_name)

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        append_jsonl(self.path, {"iteration": iteration, **metrics})
        logger.info("%s", format_line(iteration, metrics))
        scalars = _scalars(metrics)
        if self.writer is not None:
            for key, value in scalars.items():
                self.writer.add_scalar(f"train/{key}", value, iteration)
            self.writer.flush()
        for _, handle in self.trackers:
            handle.log({f"train/{k}": v for k, v in scalars.items()}, step=iteration)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        for _, handle in self.trackers:
            handle.finish()
        self.trackers = []
