"""Typed configuration of calibration and synthesis (mirrors ``conf/synthesis/default.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_envs.config_builder import build
from trace_envs.hints import hinted_count
from trace_envs.synthesis.llm.config import GENERATORS, LLMGeneratorConfig


@dataclass(frozen=True)
class CalibrationGate:
    """Acceptance gate of a calibrated env (paper §3.4 defaults)."""

    reward_min: float = 0.2
    reward_max: float = 0.6
    success_min: float = 0.2
    success_max: float = 0.6
    min_std: float = 0.05
    max_all_success: float = 0.2
    max_all_zero: float = 0.2
    max_constant: float = 0.5

    def __post_init__(self) -> None:
        for low, high in (("reward_min", "reward_max"), ("success_min", "success_max")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"synthesis.gate.{low} ({getattr(self, low)}) > synthesis.gate.{high} "
                                 f"({getattr(self, high)}): no env could pass the gate")


POLICY_KINDS = ("scripted", "model")


@dataclass(frozen=True)
class PolicyConfig:
    """The calibration policy: the scripted expert with ``knobs``, or a model (the paper: the base model).

    ``model``: a local HF directory (the pipeline fills in its base model); sampled at ``temperature``."""

    kind: str = "scripted"
    seed: int = 0
    knobs: dict[str, float] = field(default_factory=lambda: {
        "precondition": 0.5, "structured": 0.5, "multi_step": 0.5, "precision": 0.5})
    model: str | None = None
    render_tools: bool = False
    temperature: float = 1.0
    hint_uptake: float = 0.0  # scripted expert: chance it follows a hint (its knob for the env's capability x (1 - u))

    def __post_init__(self) -> None:
        from trace_envs.families.experts import KNOBS

        if self.kind not in POLICY_KINDS:
            raise ValueError(f"synthesis.policy.kind must be one of {POLICY_KINDS}, got {self.kind!r}")
        unknown = sorted(set(self.knobs) - set(KNOBS))
        if unknown:
            raise ValueError(f"synthesis.policy.knobs: unknown expert knob(s) {unknown}; choose from {list(KNOBS)}")
        for name, value in self.knobs.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"synthesis.policy.knobs.{name} must be in [0, 1], got {value}")
        if self.temperature <= 0:
            raise ValueError(f"synthesis.policy.temperature must be > 0, got {self.temperature}")
        if not 0.0 <= self.hint_uptake <= 1.0:
            raise ValueError(f"synthesis.policy.hint_uptake must be in [0, 1], got {self.hint_uptake}")


@dataclass(frozen=True)
class SearchConfig:
    max_trials: int = 8
    # capability -> knob settings; "<capability>@<domain>" gives one domain its own ladder (e.g. knobs only
    # that domain's family builds), in place of the capability's
    candidates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Candidates run easy -> hard: once one is too hard (success and mean reward below the gate), the
    # harder ones cannot pass either, so the search may stop there.
    stop_when_too_hard: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_trials, bool) or not isinstance(self.max_trials, int) or self.max_trials < 1:
            raise ValueError(f"synthesis.search.max_trials must be an integer >= 1, got {self.max_trials!r}")

    def ladder(self, capability: str, domain: str) -> list[dict[str, Any]]:
        """The candidates tried for ``capability`` on ``domain`` (``[{}]``, the family defaults, when none)."""
        return self.candidates.get(f"{capability}@{domain}") or self.candidates.get(capability) or [{}]


@dataclass(frozen=True)
class SynthesisConfig:
    domain: str = "retail-sim"
    n_seeds: int = 32
    group_size: int = 8
    seed_offset: int = 0
    pass_k: tuple[int, ...] = (1, 4, 8, 16)
    gate: CalibrationGate = field(default_factory=CalibrationGate)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    accept_closest: bool = False  # emit a capability at its closest setting when no candidate passes the gate
    hint_fraction: float = 0.0  # share of each calibration group played with the env's hint (paper §3.5)
    generator: str = "template"  # template: families only | llm: the LLM env generator too (synthesis.llm)
    llm: LLMGeneratorConfig = field(default_factory=LLMGeneratorConfig)

    def __post_init__(self) -> None:
        if self.n_seeds < 1 or self.group_size < 1:
            raise ValueError("n_seeds and group_size must be >= 1")
        hinted_count(self.hint_fraction, self.group_size, "synthesis.hint_fraction")
        if self.generator not in GENERATORS:
            raise ValueError(f"synthesis.generator must be one of {GENERATORS}, got {self.generator!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "synthesis") -> "SynthesisConfig":
        """Build from the ``synthesis`` group (a mapping or DictConfig); unknown or mistyped keys fail with a path."""
        return build(cls, data, path)
