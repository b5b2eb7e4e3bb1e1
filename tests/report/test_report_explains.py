"""The report's viewer is a bounded sample; it explains skipped capabilities and a baseline that scores 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trace_train.report import ViewerLimits, build_report
from trace_train.report.viewer import embed_json, share
from trace_train.trajectory import write_json_atomic

from .test_report import embedded


def test_share_splits_a_budget_evenly():
    assert share([40, 40, 40], 40, 30) == [10, 10, 10]
    assert share([2, 40, 40], 40, 30) == [2, 14, 14]  # a small source passes its share on
    assert share([100], 40, 150) == [40]
    assert sum(share([7, 9, 50, 3], 20, 25)) == 25
    with pytest.raises(ValueError, match="viewer.max_total must be >= 1"):
        ViewerLimits(max_total=0)


def test_viewer_sample_obeys_total_and_size_budgets(run_dir: Path, tmp_path: Path):
    data = embedded(build_report(run_dir, tmp_path / "a.html", ViewerLimits(max_per_policy=30, max_total=12))
                    .read_text(encoding="utf-8"))
    assert sum(len(s["items"]) for s in data["sources"]) == 12
    assert data["limits"]["max_total"] == 12
    small = ViewerLimits(max_per_policy=30, max_total=60, max_bytes=20_000)
    page = build_report(run_dir, tmp_path / "b.html", small).read_text(encoding="utf-8")
    data = embedded(page)
    assert len(embed_json(data).encode()) <= 20_000
    assert sum(len(s["items"]) for s in data["sources"]) < 60
    assert "of 40" in page  # the section says how much of each file is shown


def _edited_run(run_dir: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    doc = json.loads((run / "eval" / "eval.json").read_text())
    name = next(iter(doc["policies"]))
    doc["policies"][name]["overall"] |= {"rate": 0.0, "low": 0.0, "high": 0.1}
    write_json_atomic(run / "eval" / "eval.json", doc)
    selected = json.loads((run / "analysis" / "selected_capabilities.json").read_text())
    names = [c["name"] for c in selected["selected"]]
    state = json.loads((run / "pipeline.json").read_text())
    state["config"] = {"train": {"max_capabilities": 1}, "capabilities": None}
    state["stages"]["synthesis"] = {"status": "done", "outputs": {"envs": {names[0]: f"trace/{names[0]}-v0"},
                                                                  "no_family": [], "failed": []}}
    write_json_atomic(run / "pipeline.json", state)
    return run, name, names


def test_skipped_capability_and_zero_baseline_are_explained(run_dir: Path, tmp_path: Path):
    run, zero, names = _edited_run(run_dir, tmp_path)
    assert len(names) >= 2, "the shared run dir must select at least two capabilities"
    page = build_report(run, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Selected but not trained" in page
    assert f"<b>{names[1]}</b>: over the adapter cap pipeline.train.max_capabilities=1" in page
    assert f"{zero} (the base model without adapters) solved none of the" in page or f"{zero} solved none" in page
    assert "Most episodes ended by" in page
