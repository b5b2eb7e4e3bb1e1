"""Per-iteration metrics: JSONL always, TensorBoard when ``torch.utils.tensorboard`` imports."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trace_train.trajectory import append_jsonl

logger = logging.getLogger(__name__)


class MetricsLogger:
    """Appends one JSON object per iteration to ``metrics.jsonl`` (and scalars to ``tb/``)."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = True) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(log_dir=str(Path(output_dir) / "tb"))
            except ImportError:
                logger.info("tensorboard not installed; metrics go to %s only", self.path)

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        append_jsonl(self.path, {"iteration": iteration, **metrics})
        if self.writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(f"train/{key}", value, iteration)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
