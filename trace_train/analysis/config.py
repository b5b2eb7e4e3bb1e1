"""Typed configuration of the contrastive capability analysis; mirrors ``conf/analysis/default.yaml`` key for key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_envs.config_builder import build


@dataclass
class ProgrammaticLabelerConfig:
    """The probe labeler (``analysis.programmatic``)."""

    domain: str = "auto"  # auto = from the trajectories' env ids; or retail_sim, generic, tau2, ...
    include_generic: bool = True  # also offer the generic distractor probes
    capabilities: list[str] | None = None  # None = every probe of the domain
    noise_rate: float = 0.05  # per-run probability that a label is replaced by another one
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise_rate <= 1.0:
            raise ValueError(f"noise_rate must be in [0, 1], got {self.noise_rate}")


@dataclass
class LLMLabelerConfig:
    """The LLM labeler over an OpenAI-compatible endpoint (``analysis.llm``)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    api_key: str = "EMPTY"
    temperature: float = 0.7
    max_tokens: int = 4096
    timeout: float = 120.0  # seconds per HTTP attempt, in total
    retries: int = 3  # HTTP-level retries
    label_retries: int = 2  # re-asks of a batch whose answer is garbage or incomplete
    min_labeled_fraction: float = 0.9  # a labeling run below this fraction of labelled pairs fails
    batch_size: int = 8  # trajectories per labeling request
    max_candidates: int = 10  # discovery proposes at most this many capabilities
    capabilities_file: str | None = None  # skip discovery and use this candidate dictionary (JSON)
    cache_dir: str | None = None  # None = ~/.cache/trace-rl/llm_analysis
    seed: int = 0
    discovery_max_chars: int = 60000
    max_tool_chars: int = 300

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_labeled_fraction <= 1.0:
            raise ValueError(f"min_labeled_fraction must be in [0, 1], got {self.min_labeled_fraction}")
        for key, minimum in (("batch_size", 1), ("max_candidates", 1), ("retries", 0), ("label_retries", 0)):
            if getattr(self, key) < minimum:
                raise ValueError(f"analysis.llm.{key} must be >= {minimum}, got {getattr(self, key)}")


@dataclass
class AnalysisConfig:
    """Thresholds of the selection rule (paper §2.4) and the two labelers."""

    rho: float = 0.10  # per-run coverage threshold
    delta: float = 0.20  # per-run contrast threshold
    k: int = 8  # keep a capability that passes in >= k of the n_runs runs
    n_runs: int = 10  # independent labeling runs
    epsilon: float = 1e-9  # tolerance of both comparisons
    programmatic: ProgrammaticLabelerConfig = field(default_factory=ProgrammaticLabelerConfig)
    llm: LLMLabelerConfig = field(default_factory=LLMLabelerConfig)

    def __post_init__(self) -> None:
        for key, low in (("rho", 0.0), ("delta", -1.0)):  # Cov is a share, Δ a difference of two shares
            if not low <= getattr(self, key) <= 1.0:  # NaN fails too
                raise ValueError(f"analysis.{key} must be in [{low:g}, 1], got {getattr(self, key)}")
        if not self.epsilon >= 0.0:
            raise ValueError(f"analysis.epsilon must be >= 0, got {self.epsilon}")
        if self.n_runs < 1 or not 1 <= self.k <= self.n_runs:
            raise ValueError(f"need n_runs >= 1 and 1 <= k <= n_runs, got k={self.k}, n_runs={self.n_runs}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "analysis") -> AnalysisConfig:
        """Build from the ``analysis`` group (a mapping or DictConfig); unknown or mistyped keys fail with a path."""
        return build(cls, data, path)

    @classmethod
    def coerce(cls, value: AnalysisConfig | Mapping[str, Any] | Any) -> AnalysisConfig:
        """``value`` itself when it is one already, else :meth:`from_dict` of it."""
        return value if isinstance(value, cls) else cls.from_dict(value)
