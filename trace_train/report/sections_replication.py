"""Report pieces of the miniature replication: the one-line verdict at the top and the paper's tables in miniature
(``replication/tables/tables.json``, written by :mod:`trace_train.pipeline.replication`)."""

from __future__ import annotations

from typing import Any

from trace_train.evaluation.replication_table import headline
from trace_train.report.html_util import Raw, badge, fmt, section, table
from trace_train.report.loaders import RunData
from trace_train.report.svg import Series, esc, line_chart


def headline_banner(run: RunData) -> str:
    """One line under the title: does the composed model beat the base by 0.10 with the intervals apart?"""
    doc = run.eval.data
    policies = doc.get("policies") if isinstance(doc, dict) else None
    line = headline(policies) if isinstance(policies, dict) else None
    if line is None:
        return ""
    if line.startswith("Met"):
        label, kind = "met", "ok"
    else:
        label, kind = ("not measured" if line.startswith("Not measured") else "not met"), "warn"
    return f'<p class="headline">{badge(label, kind)} {esc(line)}</p>'


def _spread(agg: dict[str, Any] | None) -> str:
    if not isinstance(agg, dict):
        return "–"
    if agg.get("n_seeds", 1) > 1:
        return f"{fmt(agg['mean'])} ± {fmt(agg['std'])} ({agg['n_seeds']} seeds)"
    return fmt(agg.get("mean"))


def _per_seed(agg: dict[str, Any]) -> str:
    return ", ".join(f"{fmt(p['rate'])} [{fmt(p['low'], 2)}, {fmt(p['high'], 2)}]" for p in agg.get("per_seed", []))


def replication_section(run: RunData) -> str:
    doc = run.replication.data
    if not isinstance(doc, dict):
        return ""  # not a replication run: no section (the quick preset has none)
    parts = []
    goals = doc.get("goals") or []
    parts.append(table(["goal", "", "measured"], [
        [g["goal"], Raw(badge({True: "met", False: "not met", None: "not measured"}[g["met"]],
                              {True: "ok", False: "warn", None: "muted"}[g["met"]])), g["detail"]] for g in goals]))
    main = doc.get("main") or {}
    parts.append("<h3>Main table</h3>" + table(
        ["row", "held-out success (mean ± sd)", "per seed [95 % interval]", "training rollouts"],
        [[a.get("label", name), _spread(a), _per_seed(a), a.get("rollouts")] for name, a in main.items()]))
    routing = doc.get("routing") or {}
    if len(routing) > 1:
        parts.append("<h3>Routing ablation</h3>" + table(
            ["gates", "held-out success", "per seed"], [[k, _spread(a), _per_seed(a)] for k, a in routing.items()]))
    scale = doc.get("scale") or []
    if scale:
        parts.append("<h3>Capabilities scale</h3>" + table(
            ["k (the analysis' first k)", "TRACE with k adapters", "base prompted with k descriptions"],
            [[row["k"], _spread(row.get("trace")), _spread(row.get("prompted"))] for row in scale]))
    curves = doc.get("efficiency") or {}
    series = [Series(name, [float(p["rollouts"]) for p in points], [float(p["rate"]) for p in points],
                     [float(p["low"]) for p in points], [float(p["high"]) for p in points])
              for name, points in curves.items() if points]
    if series:
        parts.append("<h3>Sample efficiency</h3>" + line_chart(
            series, "training rollouts (episodes)", "held-out success rate", (0.0, 1.0), width=680, height=320))
    seeds = doc.get("seeds") or []
    return section("replication", "Miniature replication", "".join(parts),
                   f"The paper's tables in miniature; trained rows over run seeds {seeds} (mean ± sample sd); "
                   "untrained rows (base, prompted) once.")
