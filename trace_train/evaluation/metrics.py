"""Pass rate with Wilson intervals, τ²'s pass^k, and the per-capability breakdown.

With several trials per task the trials of one task are correlated (same task, same policy), so the
interval is a Wilson interval over an effective sample size from the cluster-robust variance of the
rate (clusters = tasks), between the number of tasks and the number of episodes; with one trial per task
it is the plain Wilson interval.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from trace_envs.records import TrajectoryRecord, record_info, task_capabilities


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95 % by default); (0, 1) when n == 0."""
    if n == 0:
        return 0.0, 1.0
    return _wilson(successes / n, n, z, at_zero=successes == 0, at_one=successes == n)


def _wilson(p: float, n: float, z: float, at_zero: bool, at_one: bool) -> tuple[float, float]:
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at 0 and n successes the bound is exactly 0 / 1; the formula leaves float dust (2.8e-17 at 0 of 11)
    low = 0.0 if at_zero else max(0.0, centre - half)
    high = 1.0 if at_one else min(1.0, centre + half)
    return low, high


def clustered_effective_n(clusters: Iterable[tuple[int, int]]) -> float | None:
    """Effective sample size of a rate over ``(successes, trials)`` clusters (tasks), or None when every
    cluster holds one trial. It is p(1 − p) over the cluster-robust variance of p (with the C/(C − 1)
    correction), kept between the number of clusters and the number of trials; with p at 0 or 1 the
    variance says nothing and the number of clusters is used."""
    clusters = [(s, m) for s, m in clusters if m > 0]
    n = sum(m for _, m in clusters)
    c = len(clusters)
    if c == n:
        return None
    p = sum(s for s, _ in clusters) / n
    if c < 2 or p in (0.0, 1.0):
        return float(c)
    variance = c / (c - 1) * sum((s - p * m) ** 2 for s, m in clusters) / n ** 2
    if variance <= 0.0:
        return float(n)
    return min(float(n), max(float(c), p * (1 - p) / variance))


def pass_hat_k(trials_per_task: dict[object, list[bool]], k: int) -> float:
    """τ²'s pass^k: mean over tasks of C(c, k) / C(n, k) (tasks with fewer than k trials are skipped)."""
    values = [math.comb(sum(t), k) / math.comb(len(t), k) for t in trials_per_task.values() if len(t) >= k]
    if not values:
        raise ValueError(f"no task has {k} trials")
    return sum(values) / len(values)


@dataclass
class RateCI:
    successes: int
    n: int
    # Set when several trials per task make the n episodes worth fewer independent ones (see the module doc).
    effective_n: float | None = None

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        if self.effective_n is None or self.n == 0:
            return wilson_interval(self.successes, self.n)
        return _wilson(self.rate, self.effective_n, 1.96, at_zero=self.successes == 0,
                       at_one=self.successes == self.n)

    def to_dict(self) -> dict[str, float]:
        low, high = self.interval
        out = {"rate": self.rate, "low": low, "high": high, "successes": self.successes, "n": self.n}
        if self.effective_n is not None:
            out["effective_n"] = self.effective_n
        return out

    @classmethod
    def of(cls, outcomes_by_task: dict[object, list[bool]]) -> RateCI:
        """The rate over every outcome, its interval clustered by task when a task has several trials."""
        clusters = [(sum(v), len(v)) for v in outcomes_by_task.values()]
        return cls(sum(s for s, _ in clusters), sum(m for _, m in clusters), clustered_effective_n(clusters))


@dataclass
class PolicySummary:
    policy: str
    overall: RateCI
    mean_reward: float
    per_capability: dict[str, RateCI] = field(default_factory=dict)
    pass_k: dict[int, float] = field(default_factory=dict)
    # Id arguments of tool calls that name a real entity (envs that report ``id_args_total``; else None).
    id_args_valid: RateCI | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "overall": self.overall.to_dict(),
            "mean_reward": self.mean_reward,
            "per_capability": {c: r.to_dict() for c, r in self.per_capability.items()},
            "pass_k": {str(k): v for k, v in self.pass_k.items()},
            "id_args_valid": None if self.id_args_valid is None else self.id_args_valid.to_dict(),
        }


def summarize(records: Iterable[TrajectoryRecord], policy: str | None = None) -> PolicySummary:
    """Success rate (Wilson CI), mean reward, per-capability rates (from the task's ground truth) and pass^k for
    every k up to the trials per task (the fewest any task has)."""
    records = list(records)
    by_cap: dict[str, dict[object, list[bool]]] = defaultdict(lambda: defaultdict(list))
    by_task: dict[object, list[bool]] = defaultdict(list)
    for record in records:
        task = (record.env_id, record.seed)
        for cap in task_capabilities(record_info(record)) or ["(none)"]:
            by_cap[cap][task].append(record.success)
        by_task[task].append(record.success)
    min_trials = min((len(v) for v in by_task.values()), default=0)
    reporting = [r for r in records if "id_args_total" in r.info]
    id_args = RateCI(sum(int(r.info.get("id_args_valid", 0)) for r in reporting),
                     sum(int(r.info["id_args_total"]) for r in reporting)) if reporting else None
    return PolicySummary(
        policy=policy or (records[0].policy if records else "?"),
        overall=RateCI.of(by_task),
        mean_reward=sum(r.reward for r in records) / len(records) if records else 0.0,
        per_capability={c: RateCI.of(v) for c, v in sorted(by_cap.items())},
        pass_k={k: pass_hat_k(by_task, k) for k in range(1, min_trials + 1)},
        id_args_valid=id_args,
    )
