"""The paper-style table of a TRACE run on held-out seeds: rows base, baselines, single adapters, TRACE.

Usage:
    python benchmarks/miniature_replication.py [--run-dir runs/quick] [--run]   # --run: run the pipeline first
    python benchmarks/miniature_replication.py --preset replication [--run]      # runs/replication

The quick preset: per policy, held-out success with its 95 % Wilson interval, mean reward, the training rollouts
it consumed and the wall time of its training stage; then the run's one-line verdict (composed >= base + 0.10
with the intervals apart) and the three goals as measured, whatever they show.

``--preset replication``: the tables of ``replication/tables/tables.json`` (main table with mean ± sd over the run
seeds, the routing ablation, capabilities scale, sample efficiency) and the four goal lines, met or not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TRACE = "TRACE (composed)"
REPLICATION_BUDGET_MIN = 180  # preset=replication on two CPU cores (issue #19)


def load(run_dir: Path) -> tuple[dict, dict, dict]:
    evaluation = json.loads((run_dir / "eval" / "eval.json").read_text())
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    curves_path = run_dir / "eval" / "sample_efficiency.json"
    curves = json.loads(curves_path.read_text())["curves"] if curves_path.exists() else {}
    return evaluation, stages, curves


def rollouts_and_wall(name: str, stages: dict) -> tuple[int | None, float | None]:
    if name == TRACE:
        train = [s for n, s in stages.items() if n.startswith("train/")]
        compose = stages.get("compose", {})
        # the target episodes the gates (or the episode router) trained on count, as in the pipeline's budget
        return (sum(s.get("outputs", {}).get("rollouts", 0) for s in train)
                + compose.get("outputs", {}).get("gate_rollouts", 0),
                sum(s.get("wall_s", 0.0) for s in train) + compose.get("wall_s", 0.0))
    for key in (f"train/{name}", f"baselines/{name}"):
        if key in stages:
            return stages[key].get("outputs", {}).get("rollouts"), stages[key].get("wall_s")
    return (0, 0.0) if name == "base" else (None, None)


def run_minutes(stages: dict) -> float:
    """The run's elapsed compute time in minutes: the union of its stages' recorded spans, as the report counts it
    (:func:`trace_train.report.stage_time.elapsed_seconds`: stages that ran at once in ``pipeline.workers``
    processes count once; a record without spans adds its ``wall_s``)."""
    from trace_train.report.stage_time import elapsed_seconds

    return elapsed_seconds(stages) / 60


def missing_from_preset(tables: dict) -> list[str]:
    """What the committed ``preset=replication`` trains and evaluates that ``tables`` lacks: run seeds, routing
    ablation rows, the capabilities-scale table, TRACE's sample-efficiency curve (empty: the whole run)."""
    from hydra import compose, initialize_config_dir

    from trace_train.paths import CONF_DIR
    from trace_train.pipeline.config import PipelineConfigs

    with initialize_config_dir(str(CONF_DIR), version_base=None):
        preset = PipelineConfigs.from_hydra(compose("pipeline", overrides=["preset=replication"]))
    rep, missing = preset.pipeline.replication, []
    seeds = [preset.grpo.seed, *rep.extra_seeds]
    if not set(seeds) <= set(tables["seeds"]):
        missing.append(f"run seeds {sorted(set(seeds) - set(tables['seeds']))}")
    rows = [f"top-{k}" for k in rep.top_k if f"top-{k}" not in tables["routing"]]
    if rows:
        missing.append(f"routing rows {rows}")
    if rep.scale and not tables["scale"]:
        missing.append("the capabilities-scale table")
    if rep.trace_curve and "TRACE" not in tables["efficiency"]:
        missing.append("TRACE's sample-efficiency curve")
    return missing


def spread(agg: dict | None) -> str:
    if not agg:
        return "-"
    if agg["n_seeds"] > 1:
        return f"{agg['mean']:.3f} ± {agg['std']:.3f} (min {agg['min']:.3f}, max {agg['max']:.3f})"
    return f"{agg['mean']:.3f}"


def print_replication(tables: dict) -> None:
    print(f"run seeds {tables['seeds']}; trained rows: mean ± sample sd over seeds")
    print(f"\n{'main table':44s} {'held-out success':44s} {'rollouts':>9s}")
    for name, agg in tables["main"].items():
        rollouts = "" if agg.get("rollouts") is None else str(agg["rollouts"])
        print(f"{agg.get('label', name):44s} {spread(agg):44s} {rollouts:>9s}")
    if len(tables["routing"]) > 1:
        print("\nrouting ablation (paper: 48.2 / 47.0 / 45.1)")
        for name, agg in tables["routing"].items():
            print(f"  {name:10s} {spread(agg)}")
    if tables["scale"]:
        print(f"\n{'capabilities scale: k':24s} {'TRACE, first k adapters':44s} prompted, k descriptions")
        for row in tables["scale"]:
            print(f"  {row['k']:<22d} {spread(row.get('trace')):44s} {spread(row.get('prompted'))}")
    for name, points in tables["efficiency"].items():
        text = ", ".join(f"{p['rollouts']}: {p['rate']:.3f}" for p in points)
        print(f"\nsample efficiency, {name} (rollouts: success): {text}")
    print()
    for goal in tables["goals"]:
        verdict = {True: "met", False: "not met", None: "not measured"}[goal["met"]]
        print(f"goal, {goal['goal']}: {goal['detail']} -> {verdict}")


def print_best_choice(run_dir: Path) -> None:
    """The best per-episode choice among the base and the run's own adapters (the ceiling of any episode-level
    router over them), beside the composition, from the held-out trajectories of ``eval/``."""
    from trace_envs.records import ReadReport, iter_trajectory_rows
    from trace_train.evaluation.combinations import combination_table, own_adapters

    adapters = own_adapters(json.loads((run_dir / "pipeline.json").read_text())["stages"])
    records = {}
    for name in ["base", *adapters, TRACE]:
        path = run_dir / "eval" / f"trajectories_{name}.jsonl"
        if path.is_file():
            records[name] = list(iter_trajectory_rows(path, ReadReport()))
    choice = [n for n in ["base", *adapters] if n in records]
    if "base" not in records or len(choice) < 2:
        return
    t = combination_table(records, choice)
    multi_n, multi = t.multi_capability()
    order, routed = t.annotation_routing({a: a for a in adapters if a in records})
    ceiling = t.annotation_ceiling
    print(f"routing on the tasks' capability annotations, the best slot per combination (the base included): "
          f"{ceiling / t.n:.3f} ({ceiling} of {t.n}; the most a router that reads only the annotations can reach)")
    print(f"routing by a priority order over the annotations ({' > '.join(order)}, the base when none): "
          f"{routed / t.n:.3f} ({routed} of {t.n})")
    print(f"best per-episode choice among {', '.join(choice)}: {t.best_choice / t.n:.3f} ({t.best_choice} of {t.n}; "
          f"the ceiling of any episode-level router over them)"
          + (f"; {TRACE}: {t.total(TRACE) / t.n:.3f}" if TRACE in records else "")
          + f"; tasks needing 2+ capabilities: {multi_n}, solved by the base {multi['base']}")


def trajectories_of(run_dir: Path, policy: str) -> Path | None:
    """A policy's held-out trajectories: the eval stage's (the run's own seed) or its replication eval stage's."""
    for path in (run_dir / "eval" / f"trajectories_{policy}.jsonl",
                 run_dir / "replication" / "eval" / policy / f"trajectories_{policy}.jsonl"):
        if path.is_file():
            return path
    return None


def slim_records(path: Path) -> list[dict]:
    """The fields the combination table reads, so a 1,000-episode file does not hold its token ids in memory."""
    from trace_envs.records import ReadReport, iter_trajectory_rows, task_capabilities

    return [{"env_id": r["env_id"], "seed": r["seed"], "success": r["success"],
             "info": {"required_capabilities": task_capabilities(r.get("info") or {}) or []}}
            for r in iter_trajectory_rows(path, ReadReport())]


def by_need(run_dir: Path, tables: dict) -> tuple[dict[str, int], dict[str, dict[str, float]]]:
    """Held-out success of each main-table row by what its tasks need (nothing, one capability alone, two or
    more), the mean over the row's run seeds: ``({group: episodes}, {row: {group: rate}})``. An untrained row
    (seed None) is the same policy in every seed; a row without trajectories on disk is left out."""
    from trace_train.evaluation.combinations import combination_table
    from trace_train.pipeline.replication import seeded

    own, rates, sizes = tables["seeds"][0], {}, {}
    read: dict[Path, list[dict]] = {}  # an untrained row's one file serves every seed: read it once
    for seed in tables["seeds"]:
        records = {}
        for row, agg in tables["main"].items():
            seeds = {p["seed"] for p in agg["per_seed"]}
            path = trajectories_of(run_dir, row if seeds == {None} else seeded(row, seed, own))
            if path is not None and (seed in seeds or seeds == {None}):
                records[row] = read[path] if path in read else read.setdefault(path, slim_records(path))
        if "base" not in records:
            continue
        for group, (n, successes) in combination_table(records, ["base"]).by_need().items():
            sizes[group] = n
            for row, k in successes.items():
                rates.setdefault(row, {}).setdefault(group, []).append(k / n)
    return sizes, {row: {g: sum(v) / len(v) for g, v in groups.items()} for row, groups in rates.items()}


def print_by_need(run_dir: Path, tables: dict) -> None:
    sizes, rows = by_need(run_dir, tables)
    if not rows:
        print("no held-out trajectories of the main table's rows on disk")
        return
    from trace_train.evaluation.combinations import NONE, SEVERAL

    groups = list(sizes)
    heads = {g: {NONE: "needs nothing", SEVERAL: "2+ capabilities"}.get(g, g.split("_")[0] + " alone") for g in groups}
    print(f"\nheld-out success by what the task needs (a capability alone: its tasks need no other; trained rows: "
          f"mean over run seeds {tables['seeds']})")
    print(f"{'row':44s} " + " ".join(f"{heads[g]:>18s}" for g in groups))
    print(f"{'':44s} " + " ".join(f"{'n = ' + str(sizes[g]):>18s}" for g in groups))
    for row, agg in tables["main"].items():
        if row in rows:
            print(f"{agg.get('label', row):44s} " + " ".join(f"{rows[row].get(g, float('nan')):18.3f}" for g in groups))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="quick", choices=["quick", "replication"])
    parser.add_argument("--run-dir", default=None, help="default: runs/<preset>")
    parser.add_argument("--run", action="store_true", help="run `trace-rl pipeline preset=<preset>` first")
    parser.add_argument("--by-need", action="store_true",
                        help="replication: also each main row's success by what the task needs (reads every row's "
                             "held-out trajectories: a few minutes)")
    args = parser.parse_args()
    run_dir = Path(args.run_dir or f"runs/{args.preset}")
    if args.run:
        subprocess.run([sys.executable, "-m", "trace_train.cli", "pipeline", f"preset={args.preset}",
                        f"pipeline.run_dir={run_dir}"], check=True)
    if args.preset == "replication":
        from trace_train.pipeline.replication import load_tables

        tables = load_tables(run_dir)
        if tables is None:
            sys.exit(f"no replication tables in {run_dir} (run `trace-rl pipeline preset=replication` or --run)")
        print_replication(tables)
        minutes = run_minutes(json.loads((run_dir / "pipeline.json").read_text())["stages"])
        missing = missing_from_preset(tables)
        if missing and minutes <= REPLICATION_BUDGET_MIN:  # a partial run's time says nothing about the whole
            verdict = f"not measured (the run lacks the preset's {'; '.join(missing)})"
        else:
            verdict = "met" if minutes <= REPLICATION_BUDGET_MIN else "not met"
        print(f"goal, run time <= {REPLICATION_BUDGET_MIN} min on 2 cores: {minutes:.1f} min while a stage ran "
              f"(stages that ran at once count once; a paused stage counts its pause) -> {verdict}")
        print_best_choice(run_dir)
        if args.by_need:
            print_by_need(run_dir, tables)
        return
    evaluation, stages, curves = load(run_dir)
    policies = evaluation["policies"]
    print(f"held-out {evaluation['env']} ({evaluation['split']} split, {evaluation['episodes']} seeds x "
          f"{evaluation['trials']} trials)")
    print(f"{'policy':28s} {'success':>8s} {'95% interval':>16s} {'reward':>7s} {'rollouts':>9s} {'wall s':>8s}")
    for name, result in policies.items():
        o = result["overall"]
        rollouts, wall = rollouts_and_wall(name, stages)
        interval = f"[{o['low']:.3f}, {o['high']:.3f}]"
        rollouts_text = "" if rollouts is None else str(rollouts)
        wall_text = "" if wall is None else f"{wall:.0f}"
        print(f"{name:28s} {o['rate']:8.3f} {interval:>16s} {result['mean_reward']:7.3f} {rollouts_text:>9s} "
              f"{wall_text:>8s}")
    base = policies.get("base", {}).get("overall", {}).get("rate")
    trace = policies.get(TRACE, {}).get("overall", {}).get("rate")
    singles = {n: r["overall"]["rate"] for n, r in policies.items()
               if f"train/{n}" in stages}
    print()
    if trace is None:
        print("no composed TRACE model in this run (composition skipped or disabled)")
        return
    from trace_train.evaluation.replication_table import EPS, headline

    print(headline(evaluation["policies"]))
    # rates are counts / n: a goal met exactly must not fail on float rounding (as the replication tables judge it)
    print(f"goal 1, TRACE - base >= 0.15: {trace - base:+.3f} -> {'met' if trace - base >= 0.15 - EPS else 'not met'}")
    target_curve = curves.get("GRPO on target", [])
    if target_curve:
        final = target_curve[-1]
        trace_rollouts = rollouts_and_wall(TRACE, stages)[0] or 0
        reached = [p for p in target_curve if p[1] >= trace]
        met = trace >= final[1] - EPS and trace_rollouts <= final[0] / 4
        print(f"goal 2, TRACE ({trace:.3f} with {trace_rollouts} rollouts) vs GRPO on target (final {final[1]:.3f} "
              f"with {final[0]:.0f}): {'met' if met else 'not met'}"
              f"{'' if not reached else f'; GRPO on target first reached TRACE at {reached[0][0]:.0f} rollouts'}")
    if singles:
        best = max(singles, key=singles.get)
        print(f"goal 3, composed > best single ({best} {singles[best]:.3f}): {trace:.3f} -> "
              f"{'met' if trace > singles[best] else 'not met'}")
    print_best_choice(run_dir)


if __name__ == "__main__":
    main()
