"""The sweep table: each capability's Δ and Cov per cell, and precision/recall against task ground truth."""

from __future__ import annotations

import csv
import io
import json

from trace_train.analysis.sweep import collect_sweep, render_csv, render_html, task_truth, write_sweep_table
from trace_train.trajectory import TrajectoryRecord, write_trajectories


def _records(annotated: bool = True) -> list[TrajectoryRecord]:
    """10 failed tasks: 8 require 'a', 2 require 'b'; 10 passed: 2 require 'a', 6 require 'b'."""
    out = []
    for i in range(20):
        failed = i < 10
        req = (["a"] if i < 8 else ["b"]) if failed else (["a"] if i < 12 else ["b"] if i < 18 else [])
        info = {"task": {"required_capabilities": req}} if annotated else {}
        out.append(TrajectoryRecord(env_id="x/y-v0", seed=i, messages=[], reward=float(not failed),
                                    success=not failed, termination="user_stop", info=info))
    return out


def _job(root, name, traj, rho, delta, selected, cands):
    job = root / name
    job.mkdir(parents=True)
    doc = {"thresholds": {"rho": rho, "delta": delta, "k": 1}, "n_runs": 1,
           "run": {"trajectories": str(traj), "overrides": [f"analysis.rho={rho}"]},
           "selected": [{"name": n} for n in selected],
           "candidates": [{"name": n, "mean_delta": d, "mean_cov": c} for n, (d, c) in cands.items()]}
    (job / "selected_capabilities.json").write_text(json.dumps(doc))


def test_task_truth_counts_and_selection(tmp_path):
    truth = task_truth(write_trajectories(tmp_path / "t.jsonl", _records()))
    cov_a, delta_a = truth.stats("a")
    assert (cov_a, round(delta_a, 3)) == (0.8, round(0.8 - 2 / 10, 3))  # 8/10 of a-tasks fail vs 2/10 others
    assert truth.selection(0.1, 0.2) == ["a"]
    assert truth.selection(0.9, 0.2) == []
    assert task_truth(write_trajectories(tmp_path / "u.jsonl", _records(False))) is None


def test_ground_truth_at_a_threshold_passes_as_in_aggregate():
    """0.7 - 0.5 is 0.19999999999999996 in floats: at δ=0.2 the analysis keeps it (Δ >= δ - ε), so must the truth."""
    from trace_train.analysis.aggregate import Thresholds
    from trace_train.analysis.sweep import TaskTruth

    truth = TaskTruth(n_failed=12, n_passed=8, failed_requiring={"c": 7}, passed_requiring={"c": 3})
    cov, delta = truth.stats("c")
    assert delta < 0.2 <= delta + Thresholds().epsilon and cov == 7 / 12
    assert truth.selection(rho=0.1, delta=0.2) == ["c"]
    assert truth.selection(rho=7 / 12 + 1e-3, delta=0.2) == []  # a genuine gap still decides
    assert truth.selection(rho=0.1, delta=0.2, epsilon=0.0) == []


def test_sweep_rows_have_per_capability_delta_cov_and_precision_recall(tmp_path):
    traj = write_trajectories(tmp_path / "t.jsonl", _records())
    root = tmp_path / "sweep"
    _job(root, "0", traj, 0.1, 0.2, ["a", "b"], {"a": (0.5, 0.8), "b": (0.21, 0.2)})
    _job(root, "1", traj, 0.9, 0.2, [], {"a": (0.5, 0.8), "b": (0.21, 0.2)})
    rows = collect_sweep(root)
    assert rows[0]["a Δ"] == 0.5 and rows[0]["b Cov"] == 0.2
    assert (rows[0]["ground_truth"], rows[0]["precision"], rows[0]["recall"]) == ("a", 0.5, 1.0)
    assert (rows[1]["ground_truth"], rows[1]["precision"], rows[1]["recall"]) == ("", None, None)
    parsed = list(csv.DictReader(io.StringIO(render_csv(rows))))
    assert list(parsed[0])[-7:] == ["a Δ", "a Cov", "b Δ", "b Cov", "ground_truth", "precision", "recall"]
    assert parsed[1]["precision"] == ""
    page = render_html(rows)
    assert "<th>a Δ</th>" in page and "<td>0.500</td>" in page
    csv_path, _ = write_sweep_table(root)
    assert csv_path.read_text(encoding="utf-8").startswith("job,")


def test_no_ground_truth_columns_without_annotations(tmp_path):
    traj = write_trajectories(tmp_path / "t.jsonl", _records(False))
    _job(tmp_path / "s", "0", traj, 0.1, 0.2, ["a"], {"a": (0.5, 0.8)})
    rows = collect_sweep(tmp_path / "s")
    assert "ground_truth" not in rows[0]
    assert "precision" not in render_csv(rows)
