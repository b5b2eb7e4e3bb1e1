"""Aggregation of labeling runs into the selected capability set (paper §2.4, exact formulas).

Per run r and capability c, over the episodes labeled in that run (missing pairs excluded):

* ``Cov = |LACKING ∩ failed| / |failed|``                       (0 when there are no failures)
* ``ER⁻ = LACKING / (LACKING + PRESENT)`` among failed episodes (NA excluded; 0 when empty)
* ``ER⁺ = LACKING / (LACKING + PRESENT)`` among passed episodes (NA excluded; 0 when empty)
* ``Δ = ER⁻ − ER⁺``; c passes run r iff ``Cov ≥ ρ`` and ``Δ ≥ δ``.

c is selected iff it passes in at least K of the N runs; the selection is ranked by mean Δ.
|failed| counts the failed episodes that the run labeled for c (NA included); pairs a labeler never
answered are excluded everywhere and reported as ``missing_pairs``. With none missing this is the
paper's ``total_failed``.

Float ties: Cov and Δ are ratios of small integers, so a value that is mathematically equal to a
threshold can land one ulp below it (e.g. 0.7 − 0.5 = 0.19999999999999996 < 0.2). Both comparisons
therefore use a tolerance ``epsilon`` (default 1e-9): ``Cov ≥ ρ − ε`` and ``Δ ≥ δ − ε``, so a value
exactly at the threshold passes. ε is far below the smallest real gap between two ratios with
denominators under 10⁴, so it never changes a genuine decision.

Support: ER⁺ of a run is a ratio over the passed episodes labeled LACKING or PRESENT for c. When the
median of that count over the runs is below ``THIN_SUPPORT`` (a base that almost never passes a task
needing c), Δ rests on a handful of labels and label noise decides it; such a candidate is flagged
(``thin_er_plus_support``), its reason says so and a warning is logged. The selection is unchanged.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from trace_envs.records import write_json_atomic
from trace_train.analysis.labels import Capability, Label, LabelRun

logger = logging.getLogger(__name__)

MAX_EXAMPLES = 8
THIN_SUPPORT = 5  # median labeled passed episodes per run below which ER⁺ (and so Δ) is flagged as noise


@dataclass(frozen=True)
class Thresholds:
    rho: float = 0.10
    delta: float = 0.20
    k: int = 8
    epsilon: float = 1e-9

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"Thresholds.k must be >= 1 (K of the N runs a capability must pass), got {self.k}")


@dataclass(frozen=True)
class RunStats:
    """One capability in one run: the counts and the derived ratios."""

    lacking_failed: int
    present_failed: int
    na_failed: int
    lacking_passed: int
    present_passed: int
    na_passed: int
    missing: int
    cov: float
    er_minus: float
    er_plus: float
    delta: float
    cov_ok: bool
    delta_ok: bool

    @property
    def passed(self) -> bool:
        return self.cov_ok and self.delta_ok


@dataclass
class CapabilityResult:
    name: str
    description: str
    runs: list[RunStats]
    n_runs_passed: int
    selected: bool
    reason: str
    mean_cov: float
    std_cov: float
    mean_delta: float
    std_delta: float
    example_failed_cases: list[str]

    @property
    def er_plus_support(self) -> list[int]:
        """Per run: the passed episodes labeled LACKING or PRESENT for this capability (ER⁺'s denominator)."""
        return [r.lacking_passed + r.present_passed for r in self.runs]

    @property
    def thin_er_plus_support(self) -> bool:
        """Applicable on failed episodes, but ER⁺ rests on fewer than THIN_SUPPORT labels in a typical run."""
        applicable = any(r.lacking_failed + r.present_failed for r in self.runs)
        return applicable and float(np.median(self.er_plus_support)) < THIN_SUPPORT

    def summary(self, n_runs: int) -> dict[str, Any]:
        support = self.er_plus_support
        return {
            "name": self.name,
            "description": self.description,
            "mean_cov": self.mean_cov,
            "std_cov": self.std_cov,
            "mean_delta": self.mean_delta,
            "std_delta": self.std_delta,
            "n_runs_passed": self.n_runs_passed,
            "n_runs_total": n_runs,
            "passes_consistency": self.selected,
            "example_failed_cases": self.example_failed_cases,
            "er_plus_support": {"min": min(support, default=0), "median": float(np.median(support)),
                                "max": max(support, default=0)},
            "thin_er_plus_support": self.thin_er_plus_support,
        }


@dataclass
class AnalysisResult:
    thresholds: Thresholds
    n_runs: int
    n_episodes: int
    n_failed: int
    n_passed: int
    candidates: list[CapabilityResult]
    missing_pairs: int = 0
    missing_by_run: dict[int, int] = field(default_factory=dict)

    @property
    def selected(self) -> list[CapabilityResult]:
        return sorted((c for c in self.candidates if c.selected), key=lambda c: (-c.mean_delta, c.name))

    def to_json(self) -> dict[str, Any]:
        selected = []
        for c in self.selected:
            entry = c.summary(self.n_runs)
            entry["status"] = "PENDING"
            selected.append(entry)
        candidates = []
        for c in sorted(self.candidates, key=lambda c: (not c.selected, -c.mean_delta, c.name)):
            entry = c.summary(self.n_runs)
            entry["keep"] = c.selected
            entry["reason"] = c.reason
            entry["per_run"] = [
                {k: v for k, v in asdict(r).items()} | {"passed": r.passed} for r in c.runs
            ]
            candidates.append(entry)
        return {
            "thresholds": asdict(self.thresholds),
            "n_runs": self.n_runs,
            "totals": {"episodes": self.n_episodes, "failed": self.n_failed, "passed": self.n_passed},
            "contrast_available": 0 < self.n_failed < self.n_episodes,
            "missing_pairs": {"total": self.missing_pairs,
                              "by_run": {str(k): v for k, v in self.missing_by_run.items()}},
            "selected": selected,
            "candidates": candidates,
        }


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def run_stats(
    run: LabelRun, capability: str, success: Mapping[str, bool], thresholds: Thresholds
) -> RunStats:
    """The counts and ratios of one capability in one run (the formulas in the module docstring)."""
    counts: Counter[tuple[Label | None, bool]] = Counter()
    missing = 0
    for episode_id, ok in success.items():
        label = run.get((episode_id, capability))
        if label is None:
            missing += 1
            continue
        counts[(label, ok)] += 1
    lf, pf, nf = (counts[(lab, False)] for lab in (Label.LACKING, Label.PRESENT, Label.NA))
    lp, pp, np_ = (counts[(lab, True)] for lab in (Label.LACKING, Label.PRESENT, Label.NA))
    failed_labeled = lf + pf + nf
    cov = _ratio(lf, failed_labeled)
    er_minus = _ratio(lf, lf + pf)
    er_plus = _ratio(lp, lp + pp)
    delta = er_minus - er_plus
    eps = thresholds.epsilon
    return RunStats(
        lacking_failed=lf, present_failed=pf, na_failed=nf,
        lacking_passed=lp, present_passed=pp, na_passed=np_, missing=missing,
        cov=cov, er_minus=er_minus, er_plus=er_plus, delta=delta,
        cov_ok=cov >= thresholds.rho - eps, delta_ok=delta >= thresholds.delta - eps,
    )


def _never_labeled(stats: Sequence[RunStats]) -> bool:
    """No run labeled the capability LACKING or PRESENT on any episode (all NA or missing)."""
    return all(s.lacking_failed + s.present_failed + s.lacking_passed + s.present_passed == 0 for s in stats)


def _reason(stats: Sequence[RunStats], n_passed: int, k: int, thresholds: Thresholds) -> str:
    n = len(stats)
    if _never_labeled(stats):  # never kept, whatever the thresholds: there is no evidence either way
        return f"dropped: never applicable (no LACKING or PRESENT label; all NA or missing) in {n} runs"
    if n_passed >= k:
        return f"kept: passed {n_passed}/{n} runs (K={k})"
    low_cov = sum(not s.cov_ok for s in stats)
    low_delta = sum(not s.delta_ok for s in stats)
    parts = []
    if low_delta:
        parts.append(f"Δ<{thresholds.delta:g} in {low_delta}")
    if low_cov:
        parts.append(f"Cov<{thresholds.rho:g} in {low_cov}")
    return f"dropped: passed {n_passed}/{n} runs (K={k}); " + ", ".join(parts)


def aggregate(
    runs: Sequence[LabelRun],
    capabilities: Sequence[Capability],
    success: Mapping[str, bool],
    thresholds: Thresholds = Thresholds(),
) -> AnalysisResult:
    """Aggregate N labeling runs over ``success`` (episode_id -> passed?) into an AnalysisResult."""
    if not runs:
        raise ValueError("aggregate needs at least one labeling run")
    if not success:
        raise ValueError("aggregate needs at least one trajectory: success (episode id -> passed?) is empty")
    repeated = sorted(name for name, count in Counter(c.name for c in capabilities).items() if count > 1)
    if repeated:
        raise ValueError(f"capabilities {repeated} are given more than once; each candidate is aggregated once")
    if thresholds.k > len(runs):
        logger.warning("K=%d exceeds the number of runs N=%d: nothing can be selected", thresholds.k, len(runs))
    results = []
    for cap in capabilities:
        stats = [run_stats(run, cap.name, success, thresholds) for run in runs]
        n_passed = sum(s.passed for s in stats)
        covs = np.array([s.cov for s in stats])
        deltas = np.array([s.delta for s in stats])
        examples = sorted(
            {eid for run in runs for eid, ok in success.items()
             if not ok and run.get((eid, cap.name)) is Label.LACKING}
        )[:MAX_EXAMPLES]
        result = CapabilityResult(
            name=cap.name, description=cap.description, runs=stats, n_runs_passed=n_passed,
            selected=n_passed >= thresholds.k and not _never_labeled(stats),  # no label is no evidence
            reason=_reason(stats, n_passed, thresholds.k, thresholds),
            mean_cov=float(covs.mean()), std_cov=float(covs.std()),
            mean_delta=float(deltas.mean()), std_delta=float(deltas.std()),
            example_failed_cases=examples,
        )
        if result.thin_er_plus_support:
            result.reason += (f"; ER⁺ rests on a median of {np.median(result.er_plus_support):g} labeled passed "
                              f"episodes per run (< {THIN_SUPPORT}): Δ is decided by label noise")
        results.append(result)
    thin = [c.name for c in results if c.thin_er_plus_support]
    if thin:
        logger.warning(
            "ER+ rests on fewer than %d labeled passed episodes per run for %s: their Δ is decided by label noise; "
            "more rollouts, or a policy that sometimes passes those tasks, give the contrast support",
            THIN_SUPPORT, ", ".join(thin),
        )
    missing_by_run = {
        run.run: sum(1 for key in run.missing if key[0] in success) for run in runs
    }
    total_missing = sum(missing_by_run.values())
    if total_missing:
        logger.warning(
            "%d (trajectory, capability) pairs were never labeled and are excluded from the statistics",
            total_missing,
        )
    n_failed = sum(not ok for ok in success.values())
    if n_failed in (0, len(success)):
        logger.warning(
            "all %d trajectories %s: there is no contrast (ER%s is 0 by definition), so the selection only "
            "reflects how often each capability is labeled at all; collect rollouts of a policy that sometimes "
            "succeeds", len(success), "failed" if n_failed else "passed", "+" if n_failed else "-",
        )
    return AnalysisResult(
        thresholds=thresholds, n_runs=len(runs), n_episodes=len(success), n_failed=n_failed,
        n_passed=len(success) - n_failed, candidates=results,
        missing_pairs=total_missing, missing_by_run=missing_by_run,
    )


def write_selected(result: AnalysisResult, path: str | Path) -> Path:
    """Write ``selected_capabilities.json`` atomically."""
    return write_json_atomic(path, result.to_json())


def candidates_table(result: AnalysisResult) -> Table:
    """A rich table of every candidate with its statistics and the reason it was kept or dropped."""
    t = result.thresholds
    table = Table(
        title=f"capability analysis: ρ={t.rho:g} δ={t.delta:g} K={t.k}/{result.n_runs} "
        f"({result.n_failed} failed / {result.n_passed} passed)",
        show_header=True, header_style="bold",
    )
    for col in ("capability", "Cov mean±std", "Δ mean±std", "runs passed", "decision"):
        table.add_column(col)
    for c in sorted(result.candidates, key=lambda c: (not c.selected, -c.mean_delta, c.name)):
        style = "green" if c.selected else "dim"
        table.add_row(
            c.name, f"{c.mean_cov:.2f}±{c.std_cov:.2f}", f"{c.mean_delta:+.2f}±{c.std_delta:.2f}",
            f"{c.n_runs_passed}/{result.n_runs}", f"[{style}]{c.reason}[/{style}]",
        )
    if result.missing_pairs:
        table.caption = f"{result.missing_pairs} unlabeled pairs excluded (see missing_pairs)"
    return table
