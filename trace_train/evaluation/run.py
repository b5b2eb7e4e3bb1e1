"""Evaluate several policies on the same held-out seeds; comparison table as JSON and as a rich table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trace_envs.records import TrajectoryRecord, write_json_atomic, write_trajectories
from trace_train.evaluation.metrics import summarize
from trace_train.workers import Job, run_jobs


def result_files(out_dir: Path) -> list[Path]:
    """What :func:`evaluate_policies` wrote into ``out_dir``: its ``eval.json`` and the trajectories of the
    policies that file names (none without one)."""
    index = Path(out_dir) / "eval.json"
    if not index.is_file():
        return []
    try:
        policies = list(json.loads(index.read_text(encoding="utf-8")).get("policies") or {})
    except (ValueError, AttributeError, OSError):  # damaged: only the index itself is known to be ours
        policies = []
    return [index, *(Path(out_dir) / f"trajectories_{name}.jsonl" for name in policies)]


def evaluate_policies(policies: dict[str, Any], env_id: str, split: str, episodes: int, trials: int = 1,
                      env_kwargs: dict | None = None, out_dir: str | Path | None = None,
                      batch: int = 32, workers: int = 1) -> dict[str, dict[str, Any]]:
    """``policies``: name -> PolicySpec. Each plays ``trials`` episodes per seed (pass^k needs k trials);
    ``workers`` policies at once, each in a worker process on one thread (:mod:`trace_train.workers`)."""
    from trace_train.policies import build_backend
    from trace_train.rollout.loop import rollout_requests, run_rollouts

    def play(name: str, spec: Any) -> dict[str, Any]:
        backend, adapter = build_backend(spec)
        requests = rollout_requests(env_id, env_kwargs or {}, split, episodes, group_size=trials)
        records: list[TrajectoryRecord] = run_rollouts(backend, requests, spec.sampling, adapter, batch,
                                                       label=f"{name:>16}")
        if out_dir is not None:
            write_trajectories(Path(out_dir) / f"trajectories_{name}.jsonl", records)
        return summarize(records, policy=name).to_dict()

    done = run_jobs([Job(name, lambda _, name=name, spec=spec: play(name, spec)) for name, spec in policies.items()],
                    workers)
    results = {name: done[name] for name in policies}
    if out_dir is not None:
        write_json_atomic(Path(out_dir) / "eval.json", {"env": env_id, "split": split, "episodes": episodes,
                                                       "trials": trials, "policies": results})
    return results


def comparison_table(results: dict[str, dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    table.add_column("tasks requiring")
    for name in results:
        table.add_column(name, justify="right")
    caps = sorted({c for r in results.values() for c in r["per_capability"]})
    rows = [("all tasks", {n: r["overall"] for n, r in results.items()})]
    rows += [(c, {n: r["per_capability"].get(c) for n, r in results.items()}) for c in caps]
    for label, cells in rows:
        table.add_row(label, *("–" if c is None else f"{c['rate']:.2f} [{c['low']:.2f}, {c['high']:.2f}] n={c['n']}"
                               for c in cells.values()))
    table.add_row("mean reward", *(f"{r['mean_reward']:.3f}" for r in results.values()))
    if any(r.get("id_args_valid") for r in results.values()):
        table.add_row("id args valid", *("–" if not r.get("id_args_valid") else
                                         f"{r['id_args_valid']['rate']:.2f} n={r['id_args_valid']['n']}"
                                         for r in results.values()))
    for k in sorted({k for r in results.values() for k in r["pass_k"]}):
        table.add_row(f"pass^{k}", *(f"{r['pass_k'].get(k, float('nan')):.3f}" for r in results.values()))
    return table


def print_comparison(results: dict[str, dict[str, Any]], title: str = "pass rate (95 % Wilson interval)") -> None:
    Console().print(comparison_table(results, title))
