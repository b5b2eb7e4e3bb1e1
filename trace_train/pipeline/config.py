"""Typed pipeline config; mirrors ``conf/pipeline.yaml`` (the preset files override it) one to one."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

BASELINES = ("grpo_target", "mixture", "sft", "prompted")
TRAINED_BASELINES = ("grpo_target", "mixture", "sft")
STAGES = ("bootstrap", "rollouts", "analysis", "synthesis", "train", "compose", "baselines", "eval", "report")


@dataclass
class RolloutStageConfig:
    episodes: int = 200
    split: str = "train"
    offset: int = 500_000  # train seeds no GRPO run is likely to revisit (GRPO seeds are hashed)
    batch_episodes: int = 32


@dataclass
class TrainStageConfig:
    max_capabilities: int = 4
    iterations: int = 5  # GRPO iterations per capability adapter
    groups_per_iter: int = 4
    group_size: int = 8
    checkpoint_every: int = 1


@dataclass
class ComposeStageConfig:
    enabled: bool = True
    max_examples_per_capability: int = 48
    epochs: int = 3
    lr: float = 5e-4
    lb_weight: float = 0.001
    label_weight: float = 0.5
    top_k: int = 1
    init: str = "base_bias"  # gate init: base_bias (every token starts on the base slot) | zero
    base_bias: float = 5.0   # the paper's base-slot bias


@dataclass
class EvalStageConfig:
    episodes: int = 200
    split: str = "test"
    trials: int = 1
    curve_episodes: int = 100  # per checkpoint of the sample-efficiency curves
    batch_episodes: int = 32
    greedy: bool = False  # evaluate every policy with greedy decoding (rollouts and training still sample)


@dataclass
class PolicyStageConfig:
    render_tools: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    threads: int = 1


@dataclass
class PipelineConfig:
    target_env: str = "trace/retail-sim-v0"
    run_dir: str = "runs/quick"
    force: list[str] = field(default_factory=list)
    base_model: str | None = None  # an HF directory; None: bootstrap (shipped checkpoint if its hash matches)
    shipped_checkpoint: str = "checkpoints/retail-sim-tiny"
    labeler: str = "programmatic"
    capabilities: list[str] | None = None  # None: the analysis' selection; else train exactly these
    baselines: list[str] = field(default_factory=lambda: ["grpo_target"])
    rollouts: RolloutStageConfig = field(default_factory=RolloutStageConfig)
    train: TrainStageConfig = field(default_factory=TrainStageConfig)
    compose: ComposeStageConfig = field(default_factory=ComposeStageConfig)
    eval: EvalStageConfig = field(default_factory=EvalStageConfig)
    policy: PolicyStageConfig = field(default_factory=PolicyStageConfig)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PipelineConfig":
        nested = {"rollouts": RolloutStageConfig, "train": TrainStageConfig, "compose": ComposeStageConfig,
                  "eval": EvalStageConfig, "policy": PolicyStageConfig}
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown pipeline keys {sorted(unknown)}; known: {sorted(names)}")
        kwargs = {}
        for key, value in data.items():
            if key in nested:
                sub = nested[key]
                bad = set(value) - {f.name for f in fields(sub)}
                if bad:
                    raise ValueError(f"unknown pipeline.{key} keys {sorted(bad)}")
                kwargs[key] = sub(**value)
            else:
                kwargs[key] = value
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise ValueError(f"unknown baselines {bad}; choose from {BASELINES}")
        bad = [s for s in self.force if s not in STAGES]
        if bad:
            raise ValueError(f"force={bad}: unknown stage; stages are {STAGES}")
        if self.train.group_size < 2:
            raise ValueError("train.group_size must be >= 2 for GRPO")
