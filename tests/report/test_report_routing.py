"""The report's routing trace: the per-capability table, a trajectory picker and tokens coloured by slot."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.report.rundir import INJECTION
from tests.report.test_report import section_html
from trace_train.report import build_report
from trace_train.report.svg import color, esc
from trace_train.trajectory import write_json_atomic

SLOTS = ["base", "precondition_verification", "multi_step_task_completion"]


def trace_doc() -> dict:
    return {
        "source": "trajectories_TRACE (composed).jsonl", "sample": 2, "slot_names": SLOTS, "max_tokens": 400,
        "records": [
            {"id": "a", "env": "trace/retail-sim-v0", "seed": 11, "success": True,
             "caps": ["precondition_verification"], "n_tokens": 4, "tokens": ["get", "_order", "(", INJECTION],
             "slots": [0, 1, 1, 2]},
            {"id": "b", "env": "trace/retail-sim-v0", "seed": 12, "success": False,
             "caps": ["multi_step_task_completion", "precondition_verification"], "n_tokens": 9,
             "tokens": ["x", "y"], "slots": [2, 2]},
        ],
        "by_capability": [
            {"capability": "multi_step_task_completion", "tasks": 1, "tokens": 9, "shares": [0.0, 0.0, 1.0]},
            {"capability": "precondition_verification", "tasks": 2, "tokens": 13, "shares": [0.077, 0.154, 0.769]},
        ],
    }


@pytest.fixture()
def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run_dir, dst)
    return dst


def test_routing_section_shows_table_picker_and_coloured_tokens(copy_run: Path):
    write_json_atomic(copy_run / "routing" / "routing_trace.json", trace_doc())
    page = build_report(copy_run).read_text()
    routing = section_html(page, "routing")
    assert "0.710" in routing  # the held-out gate report is still there
    assert "Routing per capability" in routing and "No routing trace" not in routing
    options = re.findall(r'<option value="(\d+)">([^<]*)</option>', routing)
    assert [v for v, _ in options] == ["0", "1"] and "seed 12 · failure" in options[1][1]
    spans = re.findall(r'<span class="rt-tok" data-slot="(\d)" title="([^"]*)" style="background:([^"]+)">', routing)
    assert [s for s, _, _ in spans] == ["0", "1", "1", "2", "2", "2"]
    assert all(bg == color(int(s)) and name == SLOTS[int(s)] for s, name, bg in spans)
    for i, name in enumerate(SLOTS):  # the legend: each slot's colour and name
        assert f'background:{color(i)}">&nbsp;{i}&nbsp;</span> {name}' in routing
    assert "required capabilities: <b>multi_step_task_completion, precondition_verification</b>" in routing
    assert "first 2 of 9 generated tokens" in routing
    assert re.search(r"precondition_verification</td><td>2</td><td>13</td>.*?0\.77", routing)
    assert INJECTION not in page and esc(INJECTION) in routing  # a token's text is escaped
    assert 'id="rt-pick"' in page and "addEventListener('change'" in page
    assert '<div class="rt-traj" data-i="1" hidden>' in routing  # only the first is shown before a pick


def test_routing_section_notes_a_missing_or_broken_trace(copy_run: Path):
    routing = section_html(build_report(copy_run).read_text(), "routing")
    assert "No routing trace" in routing and "routing/routing_trace.json</code> not found" in routing
    assert "rt-tok" not in routing and 'id="rt-pick"' not in routing
    (copy_run / "routing").mkdir()
    (copy_run / "routing" / "routing_trace.json").write_text("{broken")
    routing = section_html(build_report(copy_run).read_text(), "routing")
    assert "could not read" in routing and "JSONDecodeError" in routing


def test_an_episode_router_composition_reports_episodes_not_tokens(copy_run: Path):
    report = {"scope": "episode", "slot_names": SLOTS, "episodes": 20, "episode_accuracy": 0.85,
              "load": [0.0, 0.55, 0.45], "confusion": [[0, 0, 0], [0, 10, 1], [0, 2, 7]]}
    write_json_atomic(copy_run / "compose" / "routing_report.json", report)
    routing = section_html(build_report(copy_run).read_text(), "routing")
    assert "episode router" in routing and "held-out episode accuracy <b>0.850</b> over 20" in routing
    assert "load (fraction of episodes)" in routing and "token accuracy" not in routing
    assert re.search(r"multi_step_task_completion</td><td>0</td><td>2</td><td>7</td>", routing)  # a confusion row
