"""The bench page: one self-contained HTML table (built with the report's escaping helpers and SVG bars)."""

from __future__ import annotations

from pathlib import Path

from trace_envs.atomic_io import write_text_atomic
from trace_train.bench.run import BenchResult
from trace_train.report.html_util import Raw, fmt, section, table
from trace_train.report.svg import esc, interval_bar

_STYLE = ("body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
          "td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}.track{fill:#f3f4f6;stroke:#ddd}"
          ".gridv{stroke:#ccc}.muted{color:#999}")


def render(result: BenchResult, title: str = "trace-rl bench") -> str:
    caps = sorted({c for r in result.rows for c in r.per_capability})
    ks = sorted({k for r in result.rows for k in r.pass_k}, key=int)
    headers = ["env", "policy", "n", "success", "95 % CI", *[f"pass^{k}" for k in ks], "mean reward",
               f"Δ vs {result.baseline}", "Δ 95 % CI", "McNemar b/c", "p", *caps]
    rows = []
    for r in result.rows:
        delta = [fmt(r.delta, signed=True), f"[{fmt(r.delta_low, signed=True)}, {fmt(r.delta_high, signed=True)}]",
                 f"{r.mcnemar_b}/{r.mcnemar_c}", fmt(r.mcnemar_p, 4)] if r.delta is not None else [None] * 4
        rows.append([r.env, r.policy, r.n, fmt(r.success), Raw(interval_bar(r.success, r.low, r.high)),
                     *[fmt(r.pass_k.get(k)) for k in ks], fmt(r.mean_reward), *delta,
                     *[fmt(r.per_capability.get(c)) for c in caps]])
    subtitle = (f"{result.split} split, {result.episodes} seeds x {result.trials} trials, paired by seed; "
                f"Δ: paired bootstrap over seeds; p: McNemar's exact test over episodes")
    body = section("bench", title, table(headers, rows), subtitle)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>\n")


def write_html(result: BenchResult, path: str | Path, title: str = "trace-rl bench") -> Path:
    path = Path(path)
    write_text_atomic(path, render(result, title))
    return path
