"""Localization scoring: file- and function-level F1 of reported locations against gold (CodeScout-style)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trace_envs.swe.backends import repo_relative


def f1(predicted: set[str], gold: set[str]) -> float:
    if not predicted and not gold:
        return 1.0
    if not predicted or not gold:
        return 0.0
    hit = len(predicted & gold)
    if hit == 0:
        return 0.0
    precision, recall = hit / len(predicted), hit / len(gold)
    return 2 * precision * recall / (precision + recall)


def _norm_file(path: str) -> str:
    try:
        return repo_relative(path)
    except ValueError:
        return path.strip()


def _norm_function(entry: str, gold: set[str]) -> str:
    """``path::name`` normalised; a bare ``name`` matches the one gold entry with that name."""
    entry = entry.strip()
    if "::" in entry:
        path, name = entry.split("::", 1)
        return f"{_norm_file(path)}::{name.strip()}"
    matches = [g for g in gold if g.split("::", 1)[-1] == entry]
    return matches[0] if len(matches) == 1 else entry


@dataclass
class LocalizationScore:
    file_f1: float
    function_f1: float | None
    files: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)

    @property
    def reward(self) -> float:
        """Mean of file and function F1 (file F1 alone when no function gold exists)."""
        return self.file_f1 if self.function_f1 is None else (self.file_f1 + self.function_f1) / 2


def score_localization(files: list[str], functions: list[str], gold_files: list[str], gold_functions: list[str],
                       max_predictions: int = 5) -> LocalizationScore:
    """F1 over the first ``max_predictions`` reported files / functions (caps list spamming)."""
    gf = {_norm_file(f) for f in gold_files}
    gfn = set(gold_functions)
    pf = list(dict.fromkeys(_norm_file(f) for f in files))[:max_predictions]
    pfn = list(dict.fromkeys(_norm_function(f, gfn) for f in functions))[:max_predictions]
    return LocalizationScore(f1(set(pf), gf), f1(set(pfn), gfn) if gfn else None, pf, pfn)
