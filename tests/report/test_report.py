"""The static HTML report: sections, escaping, missing stages, bounds, well-formed SVG, the CLI."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.report.rundir import INJECTION
from trace_train.report import ViewerLimits, build_report
from trace_train.report.loaders import load_jsonl
from trace_train.report.viewer import embed_json, sample_indices

SECTION_IDS = ("pipeline", "analysis", "synthesis", "training", "evaluation", "efficiency", "routing", "viewer")


def embedded(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="traj-data">(.*?)</script>', page, re.S)
    assert match, "viewer data block missing"
    return json.loads(match.group(1))


def section_html(page: str, sid: str) -> str:
    match = re.search(rf'<section id="{sid}" data-section="{sid}">(.*?)</section>', page, re.S)
    assert match, f"section {sid} missing"
    return match.group(1)


@pytest.fixture(scope="module")
def page(run_dir: Path) -> str:
    path = build_report(run_dir)
    assert path == run_dir / "report.html"
    return path.read_text(encoding="utf-8")


def test_every_section_shows_the_run(page: str, run_dir: Path):
    for sid in SECTION_IDS:
        assert "notrun" not in section_html(page, sid), sid
    selected = json.loads((run_dir / "analysis" / "selected_capabilities.json").read_text())
    analysis = section_html(page, "analysis")
    for cap in selected["selected"]:
        assert cap["name"] in analysis
        assert f'{cap["n_runs_passed"]}/{cap["n_runs_total"]}' in analysis
    dropped = [c for c in selected["candidates"] if not c["keep"]]
    assert dropped, "the fixture's distractors should be dropped"
    for cap in dropped:
        assert html.escape(cap["reason"]) in analysis
    assert "trace/precondition_verification-retail_sim-v0" in section_html(page, "synthesis")
    training = section_html(page, "training")
    assert "multi_step_task_completion" in training and training.count("<polyline") >= 4
    evaluation = section_html(page, "evaluation")
    assert "oracle" in evaluation and "pass^1" in evaluation and "[0.76, 1.00]" in evaluation  # Wilson, 12/12
    assert "GRPO (target)" in section_html(page, "efficiency")
    routing = section_html(page, "routing")
    assert "0.710" in routing and "no collapse" in routing
    assert "pipeline" in page and "140.0 s" in section_html(page, "pipeline")


def test_hostile_content_is_escaped(page: str):
    # Exactly our three script elements: the error hook, the viewer data, the viewer code.
    assert len(re.findall(r"<script\b", page, re.I)) == 3
    assert INJECTION not in page
    assert "<img src=x" not in page
    assert html.escape(json.dumps(INJECTION)) in section_html(page, "pipeline")  # the config, as text
    data = embedded(page)
    base = next(s for s in data["sources"] if s["name"] == "eval: base")
    texts = [m.get("c", "") for it in base["items"] for m in it["msgs"]]
    args = [c["a"] for it in base["items"] for m in it["msgs"] for c in m.get("tc", [])]
    assert any(INJECTION in t for t in texts)
    assert any(json.dumps(INJECTION) in a for a in args)  # pretty-printed JSON arguments


def test_embed_json_cannot_close_its_script():
    text = embed_json({"x": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"x": "</script><!-- & \u2028"}


def test_viewer_data_is_bounded_and_labeled(run_dir: Path, tmp_path: Path):
    out = build_report(run_dir, tmp_path / "small.html",
                       ViewerLimits(max_per_policy=6, max_messages=8, max_chars=40, max_tool_chars=30))
    data = embedded(out.read_text(encoding="utf-8"))
    assert {s["name"] for s in data["sources"]} == {"target rollouts", "eval: base", "eval: oracle"}
    rollouts = next(s for s in data["sources"] if s["name"] == "target rollouts")
    assert rollouts["total"] == 40 and len(rollouts["items"]) == 6
    assert {it["success"] for it in rollouts["items"]} == {True, False}  # both outcomes sampled
    for source in data["sources"]:
        for it in source["items"]:
            assert len([m for m in it["msgs"] if m["r"] != "gap"]) <= 8
            for m in it["msgs"]:
                assert len(m.get("c", "")) <= 40 + len(" … [100,000 more characters]")
    assert any(m["r"] == "gap" for s in data["sources"] for it in s["items"] for m in it["msgs"])
    assert len(data["systems"]) == 1  # one system prompt shared by every trajectory
    # Majority labels of the analysis runs ride along with the target rollouts only.
    labeled = [it for it in rollouts["items"] if it.get("labels")]
    assert labeled and all(set(it["labels"].values()) <= {"LACKING", "PRESENT"} for it in labeled)
    assert not any(it.get("labels") for s in data["sources"][1:] for it in s["items"])
    full = out.stat().st_size
    assert full < (run_dir / "report.html").stat().st_size


def test_sample_indices_balances_outcomes():
    success = [True] * 90 + [False] * 10
    picked = sample_indices(success, 20)
    assert len(picked) == 20 and picked == sorted(picked)
    assert sum(not success[i] for i in picked) == 10
    assert sample_indices([True, False], 5) == [0, 1]


def test_svg_fragments_are_well_formed(page: str):
    fragments = re.findall(r"<svg\b.*?</svg>", page, re.S)
    assert len(fragments) > 20
    for frag in fragments:
        ET.fromstring(frag)


def test_missing_and_broken_stages(tmp_path: Path):
    run = tmp_path / "partial"
    (run / "eval").mkdir(parents=True)
    (run / "pipeline.json").write_text(json.dumps({"target_env": "trace/retail-sim-v0", "stages": {
        "rollout": {"status": "done", "wall_s": 1.0}, "analyze": {"status": "failed", "wall_s": 0.5},
        "train": {"status": "skipped"}}}))
    (run / "eval" / "eval.json").write_text('{"env": "x", "policies": {')  # crashed mid-write
    page = build_report(run).read_text(encoding="utf-8")
    for sid in ("analysis", "synthesis", "training", "efficiency", "routing", "viewer"):
        assert "Not run" in section_html(page, sid), sid
    assert "pipeline stage analyze: failed" in section_html(page, "analysis")
    assert "pipeline stage train: skipped" in section_html(page, "training")
    assert "Could not read <code>eval/eval.json</code>" in section_html(page, "evaluation")
    assert 'class="missing"' in page  # greyed nav links

    empty = tmp_path / "empty"
    empty.mkdir()
    page = build_report(empty).read_text(encoding="utf-8")
    assert all("notrun" in section_html(page, sid) for sid in SECTION_IDS)
    with pytest.raises(FileNotFoundError):
        build_report(tmp_path / "nope")


def test_files_of_another_shape_spoil_their_section_only(run_dir: Path, tmp_path: Path):
    """Valid JSON that is not what this version writes (hand-edited, another version): that section says so, the
    verdict line says it has none, and every other section is built."""
    import shutil

    run = tmp_path / "odd"
    shutil.copytree(run_dir, run)
    doc = json.loads((run / "eval" / "eval.json").read_text())
    doc["policies"]["TRACE (composed)"] = {"overall": None, "per_capability": [1], "pass_k": [1]}
    (run / "eval" / "eval.json").write_text(json.dumps(doc))
    (run / "analysis" / "selected_capabilities.json").write_text(json.dumps({"candidates": None, "selected": None}))
    page = build_report(run).read_text(encoding="utf-8")
    for sid in ("evaluation", "analysis"):
        assert "This section could not be built: its files are not in the shape this version writes" in \
            section_html(page, sid), sid
    assert "No verdict: eval.json is not in the shape this version writes" in page
    for sid in ("pipeline", "training", "viewer"):
        assert "could not be built" not in section_html(page, sid), sid


def test_cli_rebuilds_and_prints_path(run_dir: Path, tmp_path: Path):
    (run_dir / "report.html").unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "report", f"run_dir={run_dir}", "viewer.max_per_policy=3",
         f"hydra.run.dir={tmp_path / 'hydra'}"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str(run_dir / "report.html")
    data = embedded((run_dir / "report.html").read_text(encoding="utf-8"))
    assert all(len(s["items"]) <= 3 for s in data["sources"])


def test_jsonl_scan_limit_keeps_the_true_total(run_dir: Path):
    loaded = load_jsonl(run_dir, "rollouts/trajectories.jsonl", limit=5)
    assert len(loaded.data) == 5 and loaded.total == 40


def test_training_tolerates_other_key_names_and_a_crash(tmp_path: Path):
    run = tmp_path / "run"
    metrics = run / "train" / "adapter<x>" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    rows = [{"iteration": i, "reward_mean": 0.1 * i, "clip_frac": 0.05, "kl": 0.002, "constant_group_frac": 0.4}
            for i in range(3)] + [{"iteration": 3}]  # a row with nothing we plot
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 4, "rew')  # crash mid-line
    (run / "train" / "empty").mkdir()
    training = section_html(build_report(run).read_text(encoding="utf-8"), "training")
    assert "adapter&lt;x&gt;" in training and "adapter<x>" not in training
    last = re.search(r"<td>adapter&lt;x&gt;</td><td>(\d+)</td>", training)
    assert last and last.group(1) == "4"  # the truncated fifth row is skipped
    assert training.count("<polyline") == 1  # reward has 3 points; success has none
    assert "empty" not in training  # a folder without metrics.jsonl is not an adapter


def test_routing_falls_back_to_compose_metrics_and_flags_collapse(tmp_path: Path):
    run = tmp_path / "run"
    routing = {"slot_names": ["base", "precondition_verification"], "num_tokens": 50, "token_accuracy": 0.5,
               "episode_accuracy": 0.5, "load": [0.95, 0.05], "load_per_layer": [[0.95, 0.05]], "entropy": 0.1,
               "collapsed": True}
    (run / "compose").mkdir(parents=True)
    (run / "compose" / "compose_metrics.json").write_text(json.dumps({"train": {}, "routing": routing}))
    section = section_html(build_report(run).read_text(encoding="utf-8"), "routing")
    assert "Routing collapse onto slot <b>base</b>" in section and "0.950" in section


def test_the_report_stage_reads_as_this_page_not_running(page: str):
    stages = section_html(page, "pipeline")
    assert "this page" in stages and ">running<" not in stages


def test_analysis_section_flags_thin_er_plus_support(tmp_path: Path):
    from trace_train.analysis.aggregate import Thresholds, aggregate, write_selected
    from trace_train.analysis.labels import Capability, Label, LabelRun
    from trace_train.report.loaders import load_run
    from trace_train.report.sections_analysis import capabilities_section

    success = {f"f{i}": False for i in range(10)} | {f"p{i}": True for i in range(20)}
    labels = [Label.LACKING] * 8 + [Label.PRESENT] * 3 + [Label.NA] * 19  # one labeled passed episode
    run = LabelRun(run=0, labels={(eid, "rare_cap"): lab for eid, lab in zip(success, labels)})
    write_selected(aggregate([run], [Capability("rare_cap", "d")], success, Thresholds(k=1)),
                   tmp_path / "analysis" / "selected_capabilities.json")
    analysis = capabilities_section(load_run(tmp_path))
    assert "decided by label noise" in analysis and "<b>rare_cap</b>: a median of 1.0 per run" in analysis
    path = tmp_path / "analysis" / "selected_capabilities.json"
    doc = json.loads(path.read_text())
    doc["candidates"][0]["er_plus_support"] = ["not", "a", "dict"]  # a hand-edited file: shown, not a crash
    path.write_text(json.dumps(doc))
    assert "<b>rare_cap</b>: a median of ? per run" in capabilities_section(load_run(tmp_path))


def test_training_with_hints_shows_the_unhinted_success(tmp_path: Path):
    """With grpo.hint_fraction > 0 the success curve counts hinted members; the section splits it."""
    from trace_train.grpo.metrics import MetricsLogger

    log = MetricsLogger(tmp_path / "run" / "train" / "precondition_verification", tensorboard=False)
    for it in range(3):
        log.log(it, {"reward_mean": 0.5, "success_rate": 0.5 + 0.1 * it, "success_rate_hinted": 0.75 + 0.1 * it,
                     "success_rate_unhinted": 0.25 + 0.1 * it, "hint_logprob_shift": 0.125})
    page = build_report(tmp_path / "run", tmp_path / "r.html").read_text(encoding="utf-8")
    section = page[page.index('id="training"'):]
    section = section[:section.index("</section>")]
    for column in ("success unhinted", "success hinted", "hint log-prob shift"):
        assert f"<th>{column}</th>" in section
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    assert "0.450" in cells and "0.950" in cells and "0.125" in cells  # the last iteration's split
    assert "success rate, unhinted members" in section  # and its curve
