"""Typed configuration of the LLM env generator (``synthesis.llm`` in ``conf/synthesis/default.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_envs.config_builder import build

GENERATORS = ("template", "llm")
SCOPES = ("missing", "all")


@dataclass(frozen=True)
class ValidationLimits:
    """What the dynamic validator demands of a module and the limits of its confined subprocess."""

    n_seeds: int = 200            # oracle seeds (the issue: the oracle solves >= 95 % of 200 seeds)
    oracle_min: float = 0.95
    baseline_max: float = 0.1     # do-nothing and random-tool policies: mean reward at most this
    baseline_seeds: int = 50
    determinism_seeds: int = 10   # same seed -> same episode; these seeds must give distinct tasks
    min_distinct: float = 0.5     # share of distinct tasks among the determinism seeds
    random_turns: int = 6
    timeout_s: float = 120.0      # wall clock of the whole dynamic check
    memory_mb: int = 1024         # per process (RLIMIT_AS) and in total (watchdog)
    file_size_mb: int = 4
    max_processes: int = 8
    max_bytes: int = 60_000       # static: module size
    max_lines: int = 1500

    def __post_init__(self) -> None:
        if not 0.0 <= self.oracle_min <= 1.0 or not 0.0 <= self.baseline_max <= 1.0:
            raise ValueError("oracle_min and baseline_max must be in [0, 1]")
        if min(self.n_seeds, self.baseline_seeds, self.determinism_seeds) < 1 or self.timeout_s <= 0:
            raise ValueError(f"validation counts and timeout must be positive: {self}")


@dataclass(frozen=True)
class LLMGeneratorConfig:
    """The endpoint and the attempt budget of the LLM env generator."""

    base_url: str | None = None   # any OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
    model: str = ""
    api_key: str = "EMPTY"
    temperature: float = 0.2
    max_tokens: int = 8192
    timeout_s: float = 300.0
    retries: int = 2
    max_attempts: int = 5         # the paper's budget
    scope: str = "missing"        # missing: only capabilities no family builds; all: every capability
    n_failed_examples: int = 3    # failed trajectories lacking the capability shown to the LLM
    prompt: str | None = None     # default: prompts/env_synthesis.md
    validation: ValidationLimits = field(default_factory=ValidationLimits)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"synthesis.llm.scope must be one of {SCOPES}, got {self.scope!r}")
        if not 1 <= self.max_attempts <= 5:
            raise ValueError(f"synthesis.llm.max_attempts must be in 1..5, got {self.max_attempts}")

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "synthesis.llm") -> "LLMGeneratorConfig":
        """Build strictly (unknown or mistyped keys fail with their path); ``None`` gives the defaults."""
        return build(cls, data, path)
