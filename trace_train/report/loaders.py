"""Read a run directory into plain, typed pieces; every file is optional and may be broken.

A missing file gives ``Loaded(path, None)``; an unreadable one gives ``Loaded(path, None, error)`` so
the report can say "not run" or "could not read" instead of failing.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.records import ReadReport, RecordError, iter_jsonl_numbered, split_jsonl_lines, validate_record

logger = logging.getLogger(__name__)

PIPELINE = "pipeline.json"
ROLLOUTS = "rollouts/trajectories.jsonl"
SELECTED = "analysis/selected_capabilities.json"
LABELS_DIR = "analysis/labels"
MANIFEST = "synthesis/manifest.json"
TRAIN_DIR = "train"
ROUTING = "compose/routing_report.json"
COMPOSE_METRICS = "compose/compose_metrics.json"
EVAL = "eval/eval.json"
SAMPLE_EFFICIENCY = "eval/sample_efficiency.json"
REPLICATION = "replication/tables/tables.json"
EVAL_TRAJ = re.compile(r"^trajectories_(.+)\.jsonl$")


@dataclass
class Loaded:
    """One file of the run: its path relative to the run, its content (None if absent/broken), an error."""

    rel: str
    data: Any = None
    error: str | None = None
    total: int | None = None  # JSONL: rows in the file (``data`` may hold only the first ``limit``)
    bad_line: int | None = None  # JSONL: the first unreadable line (``data`` holds the rows before it)

    @property
    def ok(self) -> bool:
        return self.data is not None


@dataclass
class RunData:
    """Everything the report shows, as read from ``run_dir``."""

    run_dir: Path
    pipeline: Loaded
    selected: Loaded
    label_runs: list[dict[str, Any]]
    manifest: Loaded
    train: dict[str, Loaded]  # adapter -> metrics rows
    routing: Loaded
    eval: Loaded
    sample_efficiency: Loaded
    trajectories: dict[str, Loaded] = field(default_factory=dict)  # source name -> TrajectoryRecord dicts
    replication: Loaded = field(default_factory=lambda: Loaded(REPLICATION))  # the replication's tables


def load_json(run_dir: Path, rel: str) -> Loaded:
    path = run_dir / rel
    if not path.is_file():
        return Loaded(rel)
    try:
        return Loaded(rel, json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # nested too deep
        logger.warning("report: cannot read %s: %s", path, exc)
        return Loaded(rel, None, f"{type(exc).__name__}: {exc}")


def _count_lines(path: Path) -> tuple[int, int]:
    """The file's non-empty lines and the number of its last line."""
    lines = split_jsonl_lines(path.read_text(encoding="utf-8", errors="replace"))
    return sum(1 for line in lines if line.strip()), len(lines)


def load_jsonl(run_dir: Path, rel: str, limit: int | None = None, trajectories: bool = False) -> Loaded:
    """Rows of a JSONL file (only dict rows); with ``trajectories`` each row is validated as a trajectory record.
    A bad line (or a truncated last line) ends the rows read and is ``bad_line``; ``total`` then counts the
    file's non-empty lines."""
    path = run_dir / rel
    if not path.is_file():
        return Loaded(rel)
    rows: list[dict[str, Any]] = []
    report, number, error, bad_line = ReadReport(), 0, None, None
    try:
        for number, row in iter_jsonl_numbered(path, report):
            if trajectories:
                row = validate_record(row, f"{path}:{number}")
            if isinstance(row, dict):
                rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        logger.warning("report: cannot read %s: %s", path, exc)
        error = f"{type(exc).__name__}: {exc}"
        bad_line = report.bad_lines[-1] if report.bad_lines else number if isinstance(exc, RecordError) else None
    total: int | None = len(rows)
    try:
        if report.truncated_last_line:
            total, bad_line = _count_lines(path)
        elif error or (limit is not None and len(rows) >= limit):
            total = _count_lines(path)[0]
    except OSError:
        total = None if error else total  # the file cannot be read again: its length is unknown
    return Loaded(rel, (rows or None) if error else rows, error, total=total, bad_line=bad_line)


def _load_routing(run_dir: Path) -> Loaded:
    """``compose/routing_report.json`` (a RoutingReport dict, bare or under "routing"), else compose_metrics."""
    for rel in (ROUTING, COMPOSE_METRICS):
        loaded = load_json(run_dir, rel)
        if loaded.ok or loaded.error:
            if isinstance(loaded.data, dict) and isinstance(loaded.data.get("routing"), dict):
                loaded.data = loaded.data["routing"]
            elif loaded.ok and not (isinstance(loaded.data, dict) and "load" in loaded.data):
                if rel == COMPOSE_METRICS:
                    continue  # gates trained but no held-out routing report
                loaded = Loaded(rel, None, "no routing statistics in file")
            return loaded
    return Loaded(ROUTING)


def _load_label_runs(run_dir: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted((run_dir / LABELS_DIR).glob("run_*.json")):
        loaded = load_json(run_dir, str(path.relative_to(run_dir)))
        if isinstance(loaded.data, dict) and isinstance(loaded.data.get("labels"), dict):
            runs.append(loaded.data)
    return runs


def load_run(run_dir: str | Path, trajectory_scan_limit: int = 5000) -> RunData:
    """Read every known file of ``run_dir`` (see the module docstring for the tolerance rules)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    train: dict[str, Loaded] = {}
    train_root = run_dir / TRAIN_DIR
    if train_root.is_dir():
        for sub in sorted(p for p in train_root.iterdir() if p.is_dir()):
            rel = f"{TRAIN_DIR}/{sub.name}/metrics.jsonl"
            loaded = load_jsonl(run_dir, rel)
            if loaded.ok or loaded.error:
                train[sub.name] = loaded
    trajectories: dict[str, Loaded] = {}
    rollouts = load_jsonl(run_dir, ROLLOUTS, trajectory_scan_limit, trajectories=True)
    if rollouts.ok or rollouts.error:
        trajectories["target rollouts"] = rollouts
    eval_dir = run_dir / "eval"
    if eval_dir.is_dir():
        for path in sorted(eval_dir.iterdir()):
            match = EVAL_TRAJ.match(path.name)
            if match and path.is_file():
                rel = f"eval/{path.name}"
                trajectories[f"eval: {match.group(1)}"] = load_jsonl(run_dir, rel, trajectory_scan_limit,
                                                                     trajectories=True)
    return RunData(
        run_dir=run_dir,
        pipeline=load_json(run_dir, PIPELINE),
        selected=load_json(run_dir, SELECTED),
        label_runs=_load_label_runs(run_dir),
        manifest=load_json(run_dir, MANIFEST),
        train=train,
        routing=_load_routing(run_dir),
        eval=load_json(run_dir, EVAL),
        sample_efficiency=load_json(run_dir, SAMPLE_EFFICIENCY),
        trajectories=trajectories,
        replication=load_json(run_dir, REPLICATION),
    )


def num(value: Any) -> float | None:
    """``value`` as a finite float, or None (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def first_num(row: dict[str, Any], *keys: str) -> float | None:
    """The first key of ``keys`` present in ``row`` with a numeric value (metric names vary by writer)."""
    for key in keys:
        value = num(row.get(key))
        if value is not None:
            return value
    return None
