"""The miniature replication's tables and goals from evaluated policy rows (pure functions, no models).

A :class:`PolicyRow` is one evaluated policy: its table (``main``, ``routing``, ``scale``), its row label, the run
seed it was trained with (None for untrained rows: the base, the prompted base) and its held-out summary
(:func:`trace_train.evaluation.summarize`'s dict). :func:`build_tables` groups the rows by label into mean and
spread over seeds and states each goal of the issue as met / not met with its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TRACE = "TRACE (composed)"
EPISODE_ROUTED = "TRACE (episode router)"  # the same adapters under the learned episode-level router
EPS = 1e-9  # success rates are counts / n: a goal met exactly must not fail on float rounding
MAIN_ORDER = ("base", "prompted", "grpo_target", "grpo_target_4x", "mixture", "sft", "task-level router")
LABELS = {"grpo_target": "GRPO on target (TRACE's budget)", "grpo_target_4x": "GRPO on target (4x budget)",
          "mixture": "GRPO on the capability-env mixture", "sft": "SFT on synthetic successes",
          "prompted": "base + capability descriptions", TRACE: "TRACE (token-level top-1)"}


@dataclass
class PolicyRow:
    table: str
    row: str
    seed: int | None
    result: dict[str, Any]
    policy: str = ""


def aggregate(rows: Sequence[PolicyRow]) -> dict[str, Any]:
    """Mean, sample standard deviation, min and max of the held-out success over a row's seeds, with each seed's
    rate and 95 % interval."""
    per_seed = [{"seed": r.seed, "rate": r.result["overall"]["rate"], "low": r.result["overall"]["low"],
                 "high": r.result["overall"]["high"], "n": r.result["overall"]["n"]} for r in rows]
    rates = [p["rate"] for p in per_seed]
    mean = sum(rates) / len(rates)
    std = math.sqrt(sum((x - mean) ** 2 for x in rates) / (len(rates) - 1)) if len(rates) > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(rates), "max": max(rates), "n_seeds": len(rates),
            "per_seed": per_seed, "mean_reward": sum(r.result.get("mean_reward", 0.0) for r in rows) / len(rows)}


def _grouped(rows: Sequence[PolicyRow], table: str) -> dict[str, dict[str, Any]]:
    labels: dict[str, list[PolicyRow]] = {}
    for r in rows:
        if r.table == table:
            labels.setdefault(r.row, []).append(r)
    return {label: aggregate(members) for label, members in labels.items()}


def _main_order(main: Mapping[str, Any]) -> list[str]:
    """The paper's row order: base, prompted, GRPO on target (1x, 4x), each single adapter, mixture, SFT, the
    task-level router, TRACE, then TRACE's variants (gates trained by GRPO)."""
    known = [*MAIN_ORDER, TRACE]
    singles = [n for n in main if n not in known and not n.startswith("TRACE")]
    variants = [n for n in main if n.startswith("TRACE") and n != TRACE]
    order = [*MAIN_ORDER[:4], *singles, *MAIN_ORDER[4:], TRACE, *variants]
    return [n for n in order if n in main]


def build_tables(rows: Sequence[PolicyRow], curves: Mapping[str, Sequence[Mapping[str, Any]]],
                 budgets: Mapping[str, int], seeds: Sequence[int], n_adapters: int) -> dict[str, Any]:
    """``main`` (the paper's table), ``routing`` (top-1/2/4), ``scale`` (TRACE over the first k adapters vs the
    prompted base with k descriptions), ``efficiency`` (success vs rollouts) and ``goals``."""
    main = _grouped(rows, "main")
    ordered = {name: {**main[name], "label": LABELS.get(name, name), "rollouts": budgets.get(name)}
               for name in _main_order(main)}
    for name in (TRACE, EPISODE_ROUTED):  # the adapters' rollouts plus what the row's gates played
        if name in ordered:
            ordered[name]["rollouts"] = budgets.get(name, budgets.get("TRACE"))
    routing = _grouped(rows, "routing")
    if TRACE in main:
        routing = {"top-1": main[TRACE], **routing}
    scale = _grouped(rows, "scale")
    if TRACE in main and scale:
        scale[f"TRACE, {n_adapters} adapters"] = main[TRACE]
    return {"seeds": list(seeds), "main": ordered, "routing": dict(sorted(routing.items())),
            "scale": _scale_pairs(scale), "efficiency": {k: list(v) for k, v in curves.items()},
            "goals": goals(main, budgets) + (goals(main, budgets, EPISODE_ROUTED) if EPISODE_ROUTED in main else [])}


def _scale_pairs(scale: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per k: TRACE with the first k adapters beside the prompted base with the same k descriptions."""
    by_k: dict[int, dict[str, Any]] = {}
    for label, agg in scale.items():
        kind, _, rest = label.partition(", ")
        k = int(rest.split()[0])
        by_k.setdefault(k, {"k": k})["trace" if kind == "TRACE" else "prompted"] = agg
    return [by_k[k] for k in sorted(by_k)]


def _mean(main: Mapping[str, Any], name: str) -> float | None:
    return main[name]["mean"] if name in main else None


def goals(main: Mapping[str, Any], budgets: Mapping[str, int], trace_row: str = TRACE) -> list[dict[str, Any]]:
    """The issue's four goals, each ``{"goal", "met", "detail"}`` (``met`` None when a row is missing), for TRACE
    or, with ``trace_row``, another composition of the same adapters (its goals are prefixed with its name)."""
    trace, base = _mean(main, trace_row), _mean(main, "base")
    out: list[dict[str, Any]] = []
    prefix = "" if trace_row == TRACE else f"{trace_row}: "

    def add(goal: str, met: bool | None, detail: str) -> None:
        out.append({"goal": prefix + goal, "met": met, "detail": detail})

    if trace is None or base is None:
        add("TRACE >= base + 0.15", None, "no TRACE or base row")
        return out
    add("TRACE >= base + 0.15", trace - base >= 0.15 - EPS,
        f"TRACE {trace:.3f} - base {base:.3f} = {trace - base:+.3f}")
    singles = {n: a["mean"] for n, a in main.items() if n not in MAIN_ORDER and not n.startswith("TRACE")}
    if singles:
        best = max(singles, key=singles.get)
        add("TRACE > the best single adapter", trace > singles[best],
            f"TRACE {trace:.3f} vs {best} {singles[best]:.3f}")
    else:
        add("TRACE > the best single adapter", None, "no single-adapter rows")
    others = {n: _mean(main, n) for n in ("mixture", "sft") if n in main}
    add("TRACE > the mixture adapter and > SFT", all(trace > v for v in others.values()) if len(others) == 2 else None,
        ", ".join(f"{n} {v:.3f}" for n, v in others.items()) or "no mixture/SFT rows")
    target = _mean(main, "grpo_target_4x")
    if target is None:
        add("TRACE reaches GRPO-on-target's final score with <= 1/4 of its rollouts", None, "no 4x GRPO-on-target row")
    else:
        ours, theirs = budgets.get(trace_row, budgets.get("TRACE", 0)), budgets.get("grpo_target_4x", 0)
        add("TRACE reaches GRPO-on-target's final score with <= 1/4 of its rollouts",
            trace >= target - EPS and ours * 4 <= theirs,
            f"TRACE {trace:.3f} with {ours} rollouts vs GRPO on target {target:.3f} with {theirs}")
    return out


def headline(policies: Mapping[str, Mapping[str, Any]], margin: float = 0.10) -> str | None:
    """One line: whether the composed model beats the base by ``margin`` with the two 95 % intervals apart
    (``policies``: eval.json's name -> summary); "Not measured" when the run has no composed model; None
    without the base row."""
    if "base" not in policies:
        return None
    if TRACE not in policies:
        return ("Not measured: this run has no composed (TRACE) model: no capability adapter was trained (no env "
                "passed synthesis; see the Environments section) or the composition was skipped (see the "
                "pipeline's compose stage)")
    t, b = policies[TRACE]["overall"], policies["base"]["overall"]
    apart = t["low"] > b["high"]
    met = t["rate"] - b["rate"] >= margin - EPS and apart  # rates are counts / n: +0.10 exactly is met
    return (f"{'Met' if met else 'Not met'}: TRACE {t['rate']:.3f} [{t['low']:.3f}, {t['high']:.3f}] vs base "
            f"{b['rate']:.3f} [{b['low']:.3f}, {b['high']:.3f}] on {t['n']} held-out episodes "
            f"({t['rate'] - b['rate']:+.3f}; goal >= +{margin:.2f} with the intervals apart: "
            f"{'apart' if apart else 'overlapping'})")
