"""One table per Hydra sweep over the analysis thresholds: which capabilities each combination keeps.

Registered in ``conf/analyze.yaml`` as a Hydra callback; at the end of a multirun it collects every
job's ``selected_capabilities.json`` under the sweep dir and writes ``sweep_table.csv`` and a small
standalone ``sweep_table.html`` next to them. Each cell gives every candidate's mean Δ and Cov; where the
trajectories carry ground truth (retail-sim's ``info.task.required_capabilities``) it also gives the
ground-truth set for the cell's ρ/δ and the precision and recall of the selection against it.

Ground truth of a capability c at thresholds (ρ, δ): c is required by at least ρ of the failed tasks, and
tasks that require c fail at least δ more often than tasks that do not.
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from trace_envs.atomic_io import write_text_atomic
from trace_train.analysis.aggregate import Thresholds

logger = logging.getLogger(__name__)

COLUMNS = ("job", "overrides", "rho", "delta", "k", "n_runs", "n_selected", "selected")
GT_COLUMNS = ("ground_truth", "precision", "recall")


@dataclass
class TaskTruth:
    """Per capability: how many failed / passed episodes' tasks require it (from the task annotations)."""

    n_failed: int
    n_passed: int
    failed_requiring: dict[str, int]
    passed_requiring: dict[str, int]

    def stats(self, capability: str) -> tuple[float, float]:
        """(Cov, Δ) of the annotation: share of failed tasks requiring c; fail rate requiring c − not."""
        fr, pr = self.failed_requiring.get(capability, 0), self.passed_requiring.get(capability, 0)
        cov = fr / self.n_failed if self.n_failed else 0.0
        fail_req = fr / (fr + pr) if fr + pr else 0.0
        rest_f, rest_p = self.n_failed - fr, self.n_passed - pr
        fail_rest = rest_f / (rest_f + rest_p) if rest_f + rest_p else 0.0
        return cov, fail_req - fail_rest

    def selection(self, rho: float, delta: float, epsilon: float = Thresholds().epsilon) -> list[str]:
        """The capabilities with ``Cov >= rho - epsilon`` and ``Δ >= delta - epsilon``: the analysis's own rule
        (:func:`trace_train.analysis.aggregate.run_stats`), so a ratio exactly at a threshold passes."""
        caps = sorted(set(self.failed_requiring) | set(self.passed_requiring))
        return [c for c in caps if (st := self.stats(c))[0] >= rho - epsilon and st[1] >= delta - epsilon]


def task_truth(trajectories: str | Path) -> TaskTruth | None:
    """The annotation counts of a trajectories file, or ``None`` when no record carries
    ``info.task.required_capabilities`` (the env has no ground truth)."""
    from trace_envs.records import read_trajectories

    failed: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    n_failed = n_passed = annotated = 0
    for record in read_trajectories(trajectories):
        task = (record.info or {}).get("task")
        required = task.get("required_capabilities") if isinstance(task, dict) else None
        if required is None:
            continue
        annotated += 1
        counter = passed if record.success else failed
        counter.update(set(map(str, required)))
        n_passed, n_failed = n_passed + bool(record.success), n_failed + (not record.success)
    if not annotated:
        return None
    return TaskTruth(n_failed, n_passed, dict(failed), dict(passed))


def _precision_recall(selected: list[str], truth: list[str]) -> tuple[float | None, float | None]:
    hit = len(set(selected) & set(truth))
    return (hit / len(selected) if selected else None), (hit / len(truth) if truth else None)


def _trajectories_path(data: dict[str, Any], job_dir: Path) -> Path | None:
    raw = (data.get("run") or {}).get("trajectories")
    if not raw:
        return None
    for path in (Path(raw), Path.cwd() / raw, job_dir / raw):
        if path.is_file():
            return path
    return None


def collect_sweep(sweep_dir: str | Path, job_dirs: Sequence[str | Path] | None = None) -> list[dict[str, Any]]:
    """One row per job output: of each of ``job_dirs`` (the ``out`` of each job of this sweep, in job order) that
    holds one, or, without ``job_dirs``, every one found under ``sweep_dir``, ordered by job directory.

    Besides :data:`COLUMNS`, a row holds ``"<cap> Δ"`` / ``"<cap> Cov"`` (mean over the analysis runs) for
    every candidate of any job and, when the trajectories have ground truth, :data:`GT_COLUMNS`.
    """
    rows = []
    root = Path(sweep_dir)
    truths: dict[Path, TaskTruth | None] = {}
    if job_dirs is None:
        paths = sorted(root.rglob("selected_capabilities.json"), key=lambda p: _job_key(p, root))
    else:
        paths = [p for p in (Path(d) / "selected_capabilities.json" for d in job_dirs) if p.is_file()]
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        thr = data.get("thresholds", {})
        selected = [c["name"] for c in data.get("selected", [])]
        job_dir, base = path.parent.absolute(), root.absolute()
        job = job_dir.relative_to(base) if job_dir.is_relative_to(base) else job_dir
        row: dict[str, Any] = {
            "job": str(job),
            "overrides": " ".join(data.get("run", {}).get("overrides", [])),
            "rho": thr.get("rho"), "delta": thr.get("delta"), "k": thr.get("k"),
            "n_runs": data.get("n_runs"), "n_selected": len(selected), "selected": ";".join(selected),
        }
        for cand in data.get("candidates", []):
            row[f"{cand['name']} Δ"] = round(float(cand["mean_delta"]), 3)
            row[f"{cand['name']} Cov"] = round(float(cand["mean_cov"]), 3)
        traj = _trajectories_path(data, path.parent)
        if traj is not None and traj not in truths:
            truths[traj] = task_truth(traj)
        truth = truths.get(traj) if traj is not None else None
        if truth is not None and thr.get("rho") is not None and thr.get("delta") is not None:
            epsilon = thr.get("epsilon")  # the job's own tolerance (written since thresholds had one)
            gt = truth.selection(float(thr["rho"]), float(thr["delta"]),
                                 Thresholds().epsilon if epsilon is None else float(epsilon))
            precision, recall = _precision_recall(selected, gt)
            row |= {"ground_truth": ";".join(gt), "precision": precision, "recall": recall}
        rows.append(row)
    return rows


def table_columns(rows: list[dict[str, Any]]) -> list[str]:
    """:data:`COLUMNS`, then each capability's Δ and Cov (sorted by name), then the ground-truth columns."""
    caps = sorted({k[:-2] for r in rows for k in r if k.endswith(" Δ")})
    cols = list(COLUMNS) + [f"{c} {m}" for c in caps for m in ("Δ", "Cov")]
    if any("ground_truth" in r for r in rows):
        cols += list(GT_COLUMNS)
    return cols


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _job_key(path: Path, root: Path) -> tuple:
    parts = path.parent.relative_to(root).parts
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def render_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=table_columns(rows), restval="")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


def render_html(rows: list[dict[str, Any]], title: str = "capability analysis sweep") -> str:
    cols = table_columns(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in cols) + "</tr>" for row in rows
    )
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee}</style>"
        "</head><body><h1>" + html.escape(title) + "</h1>\n<table><thead><tr>" + head
        + "</tr></thead><tbody>\n" + body + "\n</tbody></table></body></html>\n"
    )


def write_sweep_table(sweep_dir: str | Path, job_dirs: Sequence[str | Path] | None = None) -> tuple[Path, Path]:
    """Write ``sweep_table.csv`` and ``sweep_table.html`` into ``sweep_dir`` (rows: :func:`collect_sweep`)."""
    root = Path(sweep_dir)
    rows = collect_sweep(root, job_dirs)
    out = []
    for name, text in (("sweep_table.csv", render_csv(rows)), ("sweep_table.html", render_html(rows))):
        out.append(write_text_atomic(root / name, text))
    logger.info("sweep table of %d jobs written to %s", len(rows), out[0])
    return out[0], out[1]


class SweepTableCallback(Callback):
    """Hydra callback: after a multirun, write the sweep table of this sweep's jobs into the sweep dir.

    Each job's ``out`` is recorded as the job ends, so a sweep dir that still holds an earlier sweep's jobs
    (``hydra.sweep.dir`` reused) gives a table of this sweep's jobs only."""

    def __init__(self) -> None:
        self.job_dirs: list[Path] = []

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.job_dirs = []

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.utils import to_absolute_path
        from omegaconf import OmegaConf

        out = OmegaConf.select(config, "out")  # resolved with the job's own Hydra config, still the current one
        if out is not None:
            self.job_dirs.append(Path(to_absolute_path(str(out))))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            logger.warning("sweep dir %s does not exist; no sweep table", sweep_dir)
            return
        write_sweep_table(sweep_dir, self.job_dirs)
