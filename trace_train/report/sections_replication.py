"""Report pieces of the miniature replication: the one-line verdict at the top and the paper's tables in miniature
(``replication/tables/tables.json``, written by :mod:`trace_train.pipeline.replication`)."""

from __future__ import annotations

from typing import Any

from trace_train.evaluation.replication_table import headline
from trace_train.report.html_util import Raw, badge, fmt, not_run, section, table
from trace_train.report.loaders import RunData
from trace_train.report.svg import Series, esc, line_chart


def headline_banner(run: RunData, seed_note: str = "") -> str:
    """One line under the title: does the composed model beat the base by 0.10 with the intervals apart?
    ``seed_note`` (:func:`own_seed_note`) follows the verdict."""
    doc = run.eval.data
    policies = doc.get("policies") if isinstance(doc, dict) else None
    line = headline(policies) if isinstance(policies, dict) else None
    if line is None:
        return ""
    if line.startswith("Met"):
        label, kind = "met", "ok"
    else:
        label, kind = ("not measured" if line.startswith("Not measured") else "not met"), "warn"
    return f'<p class="headline">{badge(label, kind)} {esc(line)}{esc(seed_note)}</p>'


def own_seed_note(run: RunData) -> str:
    """Which run seed the verdict is from, when the run also trained other seeds (eval.json is the own seed's)."""
    doc = run.replication.data
    seeds = doc.get("seeds") if isinstance(doc, dict) else None
    if isinstance(seeds, list) and len(seeds) > 1:
        return (f" (run seed {seeds[0]} only, from eval/eval.json; the Replication section gives the mean over "
                f"run seeds {', '.join(map(str, seeds))})")
    stages = run.pipeline.data.get("stages") if isinstance(run.pipeline.data, dict) else None
    extra = sorted({str(name).rsplit("@s", 1)[1] for name in stages or () if "@s" in str(name)})
    if extra:
        return f" (the run's own seed only, from eval/eval.json; not its extra run seeds {', '.join(extra)})"
    return ""


def _trained(agg: dict[str, Any]) -> bool:
    """A row trained per run seed (its per-seed entries name the seed); base and prompted are played once."""
    return any(isinstance(p, dict) and p.get("seed") is not None for p in agg.get("per_seed") or [])


def _spread(agg: dict[str, Any] | None, n_seeds: int = 0) -> str:
    if not isinstance(agg, dict):
        return "–"
    k = agg.get("n_seeds", 1)
    of = f" ({k} of {n_seeds} seeds)" if n_seeds and _trained(agg) else f" ({k} seeds)" if k > 1 else ""
    if k > 1:
        return f"{fmt(agg['mean'])} ± {fmt(agg['std'])}{of}"
    return fmt(agg.get("mean")) + of


def _per_seed(agg: dict[str, Any]) -> str:
    return ", ".join((f"seed {p['seed']}: " if p.get("seed") is not None else "")
                     + f"{fmt(p['rate'])} [{fmt(p['low'], 2)}, {fmt(p['high'], 2)}]" for p in agg.get("per_seed", []))


def replication_section(run: RunData) -> str:
    doc = run.replication.data
    if run.replication.error:
        return section("replication", "Miniature replication", not_run(run.replication, run.pipeline, "replication"))
    if doc is None:
        return ""  # not a replication run: no section (the quick preset has none)
    if not isinstance(doc, dict):
        raise TypeError(f"{run.replication.rel} holds a {type(doc).__name__}, not an object")
    seeds = doc.get("seeds") or []
    n_seeds = len(seeds) if isinstance(seeds, list) else 0
    parts = []
    goals = doc.get("goals") or []
    parts.append(table(["goal", "", "measured"], [
        [g["goal"], Raw(badge({True: "met", False: "not met", None: "not measured"}[g["met"]],
                              {True: "ok", False: "warn", None: "muted"}[g["met"]])), g["detail"]] for g in goals]))
    main = doc.get("main") or {}
    parts.append("<h3>Main table</h3>" + table(
        ["row", "held-out success (mean ± sd)", "per seed [95 % interval]", "training rollouts"],
        [[a.get("label", name), _spread(a, n_seeds), _per_seed(a), a.get("rollouts")] for name, a in main.items()]))
    routing = doc.get("routing") or {}
    if len(routing) > 1:
        parts.append("<h3>Routing ablation</h3>" + table(
            ["gates", "held-out success", "per seed"],
            [[k, _spread(a, n_seeds), _per_seed(a)] for k, a in routing.items()]))
    scale = doc.get("scale") or []
    if scale:
        parts.append("<h3>Capabilities scale</h3>" + table(
            ["k (the analysis' first k)", "TRACE with k adapters", "base prompted with k descriptions"],
            [[row["k"], _spread(row.get("trace"), n_seeds), _spread(row.get("prompted"), n_seeds)] for row in scale]))
    curves = doc.get("efficiency") or {}
    series = [Series(name, [float(p["rollouts"]) for p in points], [float(p["rate"]) for p in points],
                     [float(p["low"]) for p in points], [float(p["high"]) for p in points])
              for name, points in curves.items() if points]
    if series:
        parts.append("<h3>Sample efficiency</h3>" + line_chart(
            series, "training rollouts (episodes)", "held-out success rate", (0.0, 1.0), width=680, height=320))
    return section("replication", "Miniature replication", "".join(parts),
                   f"The paper's tables in miniature; trained rows over run seeds {seeds} (mean ± sample sd); "
                   "untrained rows (base, prompted) once.")
