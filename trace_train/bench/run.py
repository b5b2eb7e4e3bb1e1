"""Play every policy on every env on the same held-out seeds; one row per (env, policy) with paired stats.

Outcomes are paired by (env, seed, trial): each policy's ``trials`` episodes per seed use the same
sampler seeds, so the base and an adapter see identical tasks. The comparison unit of the bootstrap
is the seed (its mean success over trials); McNemar pairs single episodes and, since it needs independent
pairs, reads the first trial of each seed (the trials of one seed are correlated).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from trace_envs.records import TrajectoryRecord
from trace_train.bench.stats import mcnemar_exact, paired_bootstrap
from trace_train.evaluation.metrics import summarize


@dataclass
class BenchRow:
    env: str
    policy: str
    n: int
    success: float
    low: float
    high: float
    mean_reward: float
    pass_k: dict[str, float] = field(default_factory=dict)
    per_capability: dict[str, float] = field(default_factory=dict)
    delta: float | None = None  # success - base success, paired by seed
    delta_low: float | None = None
    delta_high: float | None = None
    mcnemar_b: int | None = None  # episodes only the base solved
    mcnemar_c: int | None = None  # episodes only this policy solved
    mcnemar_p: float | None = None


@dataclass
class BenchResult:
    baseline: str
    split: str
    episodes: int
    trials: int
    rows: list[BenchRow]

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "split": self.split, "episodes": self.episodes, "trials": self.trials,
                "rows": [asdict(r) for r in self.rows]}


def _outcomes(records: list[TrajectoryRecord]) -> dict[tuple[int, int], bool]:
    """(seed, trial index within the seed) -> success; requests are played in the same order by every policy."""
    seen: dict[int, int] = defaultdict(int)
    out = {}
    for r in records:
        out[(r.seed, seen[r.seed])] = r.success
        seen[r.seed] += 1
    return out


def compare(env: str, records: dict[str, list[TrajectoryRecord]], baseline: str, n_boot: int = 2000,
            seed: int = 0) -> list[BenchRow]:
    """Rows of one env: summary per policy and, for all but ``baseline``, the paired stats against it."""
    base = _outcomes(records[baseline])
    rows = []
    for name, recs in records.items():
        s = summarize(recs, policy=name)
        overall = s.overall.to_dict()
        row = BenchRow(env=env, policy=name, n=s.overall.n, success=overall["rate"], low=overall["low"],
                       high=overall["high"], mean_reward=s.mean_reward,
                       pass_k={str(k): v for k, v in s.pass_k.items()},
                       per_capability={c: r.rate for c, r in s.per_capability.items()})
        if name != baseline:
            mine = _outcomes(recs)
            keys = sorted(set(base) & set(mine))
            if len(keys) != len(base) or len(keys) != len(mine):
                raise ValueError(f"{env}: {name} and {baseline} did not play the same episodes")
            first = [k for k in keys if k[1] == 0]
            row.mcnemar_b, row.mcnemar_c, row.mcnemar_p = mcnemar_exact([base[k] for k in first],
                                                                        [mine[k] for k in first])
            per_seed: dict[int, list[tuple[bool, bool]]] = defaultdict(list)
            for k in keys:
                per_seed[k[0]].append((base[k], mine[k]))
            b = [sum(x for x, _ in v) / len(v) for v in per_seed.values()]
            o = [sum(y for _, y in v) / len(v) for v in per_seed.values()]
            row.delta, row.delta_low, row.delta_high = paired_bootstrap(b, o, n_boot=n_boot, seed=seed)
        rows.append(row)
    return rows


def run_bench(policies: dict[str, Any], envs: list[str], split: str, episodes: int, trials: int = 1,
              baseline: str | None = None, batch: int = 32, n_boot: int = 2000, seed: int = 0,
              played: dict[tuple[str, str], list[TrajectoryRecord]] | None = None) -> BenchResult:
    """``policies``: name -> PolicySpec (first one is the baseline unless named). Each backend is built
    once and plays every env; ``played`` collects the records (``(env, policy) -> records``)."""
    from trace_train.policies import build_backend
    from trace_train.rollout.loop import rollout_requests, run_rollouts

    if not policies or not envs:
        raise ValueError("bench needs at least one policy and one env")
    baseline = baseline or next(iter(policies))
    if baseline not in policies:
        raise ValueError(f"baseline {baseline!r} is not one of the policies {sorted(policies)}")
    by_env: dict[str, dict[str, list[TrajectoryRecord]]] = {env: {} for env in envs}
    for name, spec in policies.items():
        backend, adapter = build_backend(spec)
        for env in envs:
            requests = rollout_requests(env, {}, split, episodes, group_size=trials)
            by_env[env][name] = run_rollouts(backend, requests, spec.sampling, adapter, batch,
                                             label=f"{name:>12} {env}")
            if played is not None:
                played[(env, name)] = by_env[env][name]
    rows = [row for env in envs for row in compare(env, by_env[env], baseline, n_boot, seed)]
    return BenchResult(baseline=baseline, split=split, episodes=episodes, trials=trials, rows=rows)
