"""The ``moe`` config group (conf/moe/default.yaml) as one typed dataclass: how the gates route and train."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_envs.config_builder import build
from trace_moe.gate_training import GateTrainConfig
from trace_moe.gated_lora import GateConfig


@dataclass
class MoEConfig:
    """``gate``: routing of the composed model (top-k, init, base bias); ``train``: the gate optimisation."""

    gate: GateConfig = field(default_factory=GateConfig)
    train: GateTrainConfig = field(default_factory=GateTrainConfig)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "moe") -> MoEConfig:
        """Build strictly from the ``moe`` group (a mapping or DictConfig): unknown or mistyped keys fail with
        their path (``moe.train.epochs: expected int, got 'x' (str)``)."""
        return build(cls, data, path)
