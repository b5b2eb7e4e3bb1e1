"""Report section: held-out success by the combination of capabilities a task needs, with the best
per-episode choice over the base and the single adapters (the ceiling of any episode-level router) and the
ceiling of a router that reads the tasks' capability annotations."""

from __future__ import annotations

from typing import Any

from trace_train.evaluation.combinations import (
    EXACT_ORDERS_UP_TO,
    CombinationTable,
    combination_table,
    own_adapters,
)
from trace_train.report.html_util import Raw, section, table
from trace_train.report.loaders import RunData
from trace_train.report.svg import esc

SID = "combinations"
TITLE = "Capability combinations"
BASE = "base"


def _adapters(run: RunData) -> list[str]:
    stages = run.pipeline.data.get("stages") if isinstance(run.pipeline.data, dict) else None
    return own_adapters(stages) if isinstance(stages, dict) else []


def _eval_records(run: RunData) -> dict[str, list[dict[str, Any]]]:
    """Each evaluated policy's held-out records, in ``eval.json``'s order (then any others)."""
    prefix = "eval: "
    found = {name[len(prefix):]: loaded.data for name, loaded in run.trajectories.items()
             if name.startswith(prefix) and loaded.ok}
    policies = run.eval.data.get("policies") if isinstance(run.eval.data, dict) else None
    order = [str(p) for p in policies] if isinstance(policies, dict) else []
    return {p: found[p] for p in order + sorted(found) if p in found}


def _damaged_note(run: RunData) -> str:
    """A warning naming each held-out file the report could read only part of (an unreadable line), or none of."""
    notes = []
    for name, loaded in run.trajectories.items():
        if not name.startswith("eval: ") or not (loaded.error or loaded.bad_line):
            continue
        where = f"line {loaded.bad_line} unreadable" if loaded.bad_line else "unreadable"
        read = f"only its {len(loaded.data)} episodes before it are in this table" if loaded.ok else "not in this table"
        notes.append(f"<code>{esc(loaded.rel)}</code> {where} ({read}; the file has {loaded.total} lines)"
                     if loaded.total is not None else f"<code>{esc(loaded.rel)}</code> {where} ({read})")
    if not notes:
        return ""
    return (f'<p class="note warn"><b>Partial:</b> {"; ".join(notes)}. The table covers only the episodes every '
            "policy has.</p>")


def _scan_note(run: RunData, policies: list[str]) -> str:
    """A warning when the report read only the first rows of a policy's held-out file (its scan limit)."""
    cut = {name[len("eval: "):]: loaded for name, loaded in run.trajectories.items()
           if name[len("eval: "):] in policies and loaded.ok and loaded.total is not None
           and loaded.total > len(loaded.data) and not (loaded.error or loaded.bad_line)}
    if not cut:
        return ""
    shown = ", ".join(f"{esc(p)} {len(f.data)} of {f.total}" for p, f in sorted(cut.items()))
    return (f"<p><b>Partial:</b> the report reads at most the first {max(len(f.data) for f in cut.values())} "
            f"episodes of a file, so this table covers only part of these policies' held-out episodes ({shown}); "
            "the results table above has them all.</p>")


def _count(successes: int, n: int) -> Raw:
    rate = successes / n if n else 0.0
    return Raw(f'<span class="num">{successes}</span> <span class="muted">({rate:.2f})</span>')


def _summary(t: CombinationTable, composed: list[str], adapters: list[str]) -> str:
    n = t.n
    choice = ", ".join(t.choice)
    parts = [f"Best per-episode choice among {esc(choice)}: <b>{t.best_choice} of {n}</b> "
             f"({t.best_choice / n:.3f}) — the most any episode-level router over them can reach."]
    ceiling = t.annotation_ceiling
    parts.append(f"Routing on each task's own capability annotations, the best slot for each combination of "
                 f"capabilities (the base included, chosen on these episodes): <b>{ceiling} of {n}</b> "
                 f"({ceiling / n:.3f}) — the most a router that reads only the annotations can reach with these "
                 "adapters.")
    order, routed = t.annotation_routing({a: a for a in adapters}, BASE)
    best = ("the best order on these episodes" if len(adapters) <= EXACT_ORDERS_UP_TO else
            f"an order built greedily on these episodes, as {len(adapters)} adapters have too many orders to try")
    parts.append(f"Routing by a priority order over the annotations (the adapter of the first capability a task "
                 f"needs in the order {esc(' > '.join(order))}, the base when none; {best}): "
                 f"<b>{routed} of {n}</b> ({routed / n:.3f}).")
    for name in composed:
        parts.append(f"{esc(name)}: {t.total(name)} of {n} ({t.total(name) / n:.3f}).")
    multi_n, multi = t.multi_capability()
    if multi_n:
        best = max(multi, key=lambda p: multi[p])
        parts.append(f"Tasks needing two or more capabilities: {multi_n} of {n}; the most any policy solves "
                     f"among them is {multi[best]} ({esc(best)}).")
    return "<p>" + " ".join(parts) + "</p>"


def combinations_section(run: RunData) -> str:
    """One row per capability combination of the held-out tasks; empty when the run has no adapters."""
    records = _eval_records(run)
    adapters = [a for a in _adapters(run) if a in records]
    if BASE not in records or not adapters:
        return ""
    t = combination_table(records, [BASE] + adapters)
    if not t.n:
        return ""
    composed = [p for p in t.policies if p.startswith("TRACE")]
    rows = [[c.label, c.n] + [_count(c.successes[p], c.n) for p in t.policies] + [_count(c.best_choice, c.n)]
            for c in t.cells]
    rows.append([Raw("<b>all tasks</b>"), t.n] + [_count(t.total(p), t.n) for p in t.policies]
                + [_count(t.best_choice, t.n)])
    head = ("<p>Held-out episodes grouped by the capabilities their task needs (the env's ground truth), "
            "successes per policy on the same seeds. <i>best choice</i>: the episode counts when the base or any "
            "single adapter solved it.</p>")
    return section(SID, TITLE, head + _damaged_note(run) + _scan_note(run, t.policies) + _summary(t, composed, adapters)
                   + table(["tasks needing", "n"] + t.policies + ["best choice"], rows, "eval"),
                   "Where a composition can win: one adapter fixes one capability, so tasks that need several "
                   "are won only by switching adapters inside the episode.")
