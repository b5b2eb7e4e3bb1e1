"""One table per Hydra sweep over the analysis thresholds: which capabilities each combination keeps.

Registered in ``conf/analyze.yaml`` as a Hydra callback; at the end of a multirun it collects every
job's ``selected_capabilities.json`` under the sweep dir and writes ``sweep_table.csv`` and a small
standalone ``sweep_table.html`` next to them.
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trace_envs.atomic_io import write_text_atomic

logger = logging.getLogger(__name__)

COLUMNS = ("job", "overrides", "rho", "delta", "k", "n_runs", "n_selected", "selected")


def collect_sweep(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One row per job output found under ``sweep_dir``, ordered by job directory."""
    rows = []
    root = Path(sweep_dir)
    for path in sorted(root.rglob("selected_capabilities.json"), key=lambda p: _job_key(p, root)):
        data = json.loads(path.read_text(encoding="utf-8"))
        thr = data.get("thresholds", {})
        selected = [c["name"] for c in data.get("selected", [])]
        rows.append({
            "job": str(path.parent.relative_to(root)),
            "overrides": " ".join(data.get("run", {}).get("overrides", [])),
            "rho": thr.get("rho"), "delta": thr.get("delta"), "k": thr.get("k"),
            "n_runs": data.get("n_runs"), "n_selected": len(selected), "selected": ";".join(selected),
        })
    return rows


def _job_key(path: Path, root: Path) -> tuple:
    parts = path.parent.relative_to(root).parts
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def render_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def render_html(rows: list[dict[str, Any]], title: str = "capability analysis sweep") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(str(row[c]))}</td>" for c in COLUMNS) + "</tr>" for row in rows
    )
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee}</style>"
        "</head><body><h1>" + html.escape(title) + "</h1>\n<table><thead><tr>" + head
        + "</tr></thead><tbody>\n" + body + "\n</tbody></table></body></html>\n"
    )


def write_sweep_table(sweep_dir: str | Path) -> tuple[Path, Path]:
    """Write ``sweep_table.csv`` and ``sweep_table.html`` into ``sweep_dir``."""
    root = Path(sweep_dir)
    rows = collect_sweep(root)
    out = []
    for name, text in (("sweep_table.csv", render_csv(rows)), ("sweep_table.html", render_html(rows))):
        out.append(write_text_atomic(root / name, text))
    logger.info("sweep table of %d jobs written to %s", len(rows), out[0])
    return out[0], out[1]


class SweepTableCallback(Callback):
    """Hydra callback: after a multirun, write the sweep table into the sweep dir."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            logger.warning("sweep dir %s does not exist; no sweep table", sweep_dir)
            return
        write_sweep_table(sweep_dir)
