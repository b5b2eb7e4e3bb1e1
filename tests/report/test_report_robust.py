"""Inputs that once lost a section or the whole page: damaged or deeply nested JSON, lone surrogates, numbers
too large to plot, viewer data over its byte budget, many slots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.report.test_report import embedded, section_html
from tests.report.test_report_routing import trace_doc
from trace_envs.records import dumps_line
from trace_train.report import ViewerLimits, build_report
from trace_train.report.loaders import load_jsonl
from trace_train.report.svg import color
from trace_train.report.viewer import embed_json
from trace_train.trajectory import write_json_atomic


@pytest.fixture()
def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run_dir, dst)
    (dst / "report.html").unlink(missing_ok=True)
    return dst


def tables_doc(seeds: list[int]) -> dict:
    per_seed = [{"seed": s, "rate": 0.3, "low": 0.2, "high": 0.4, "n": 100} for s in seeds]
    return {"seeds": seeds, "goals": [], "routing": {}, "scale": [],
            "main": {"TRACE (composed)": {"mean": 0.3, "std": 0.0, "n_seeds": len(seeds), "per_seed": per_seed,
                                         "label": "TRACE", "rollouts": 400}},
            "efficiency": {"TRACE": [{"rollouts": 100, "rate": 0.2, "low": 0.1, "high": 0.3},
                                     {"rollouts": 200, "rate": 0.3, "low": 0.2, "high": 0.4},
                                     {"rollouts": 320, "rate": 0.4, "low": 0.3, "high": 0.5}]}}


def test_a_damaged_replication_table_says_so_in_its_section(copy_run: Path):
    path = copy_run / "replication" / "tables" / "tables.json"
    path.parent.mkdir(parents=True)
    text = json.dumps(tables_doc([0, 1]), indent=2)
    path.write_text(text[: len(text) // 2])  # a crash mid-copy
    page = build_report(copy_run).read_text(encoding="utf-8")
    replication = section_html(page, "replication")
    assert "Could not read <code>replication/tables/tables.json</code>" in replication
    assert '<a href="#replication" class="missing">' in page


def test_a_lone_surrogate_is_replaced_and_the_page_built(copy_run: Path):
    path = copy_run / "eval" / "trajectories_base.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["messages"][1]["content"] = "half an emoji: \ud83d, then é ✓"
    path.write_text("".join(dumps_line(r) for r in rows))  # written escaped, read back as a lone surrogate
    doc = trace_doc()
    doc["records"][0]["tokens"][0] = "\udc00"
    write_json_atomic(copy_run / "routing" / "routing_trace.json", doc)
    page = build_report(copy_run).read_text(encoding="utf-8")
    assert "could not be built" not in section_html(page, "viewer")
    base = next(s for s in embedded(page)["sources"] if s["name"] == "eval: base")
    assert any("half an emoji: \ufffd, then é ✓" in m.get("c", "") for it in base["items"] for m in it["msgs"])
    assert 'style="background:#2563eb">\ufffd</span>' in section_html(page, "routing")


def test_non_finite_and_huge_numbers_spoil_only_their_chart(copy_run: Path):
    path = copy_run / "replication" / "tables" / "tables.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(tables_doc([0, 1])).replace('"rollouts": 320', '"rollouts": 1e400'))  # reads as inf
    metrics = copy_run / "train" / "precondition_verification" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[0]["reward_mean"], rows[1]["reward_mean"] = 1e308, -1e308  # a diverged run
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report(copy_run).read_text(encoding="utf-8")
    replication = section_html(page, "replication")
    assert "1 point with a non-finite value left out of this chart" in replication and "<polyline" in replication
    training = section_html(page, "training")
    assert "Not plotted: the values (value -1e+308 to 1e+308" in training
    assert training.count("Not plotted") == 1 and training.count("<polyline") >= 3  # the other charts are drawn
    for sid in ("replication", "training"):
        assert "could not be built" not in section_html(page, sid)


def test_the_embedded_viewer_data_always_fits_its_budget(copy_run: Path, tmp_path: Path):
    path = copy_run / "eval" / "trajectories_base.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    calls = [{"id": f"c{i}", "type": "function", "function": {
        "name": "get_order_details" + "x" * 5000 * (i == 0), "arguments": json.dumps({"order_id": "#W" + "x" * 1000})}}
        for i in range(3000)]  # a generation loop
    rows[next(i for i, r in enumerate(rows) if r["success"])]["messages"].append(
        {"role": "assistant", "content": "", "tool_calls": calls})
    path.write_text("".join(dumps_line(r) for r in rows))
    for limits in (ViewerLimits(), ViewerLimits(max_bytes=50_000)):
        page = build_report(copy_run, tmp_path / f"{limits.max_bytes}.html", limits).read_text(encoding="utf-8")
        data = embedded(page)
        assert len(embed_json(data).encode()) <= limits.max_bytes
        names = [c["n"] for s in data["sources"] for it in s["items"] for m in it["msgs"] for c in m.get("tc", [])]
        assert all(len(n) <= 200 + len(" … [5,000 more characters]") for n in names)
    viewer = section_html(page, "viewer")
    assert "the embedded data at most 50,000 bytes" in viewer
    left = data["left_out"]["trajectories"]
    assert left > 0 and f"within 50,000 bytes, {left} of the {data['left_out']['sampled']} sampled" in viewer
    default = embedded(build_report(copy_run, tmp_path / "d.html").read_text(encoding="utf-8"))
    base = next(s for s in default["sources"] if s["name"] == "eval: base")
    assert any(c["a"] == "2,980 more tool calls left out" for it in base["items"] for m in it["msgs"]
               for c in m.get("tc", []))
    with pytest.raises(ValueError, match="viewer.max_bytes must be >= 10000"):
        ViewerLimits(max_bytes=5)


def test_a_trajectory_too_big_for_the_budget_alone_does_not_thin_the_other_files(copy_run: Path, tmp_path: Path):
    """It was kept to the end while every other file was halved down to one trajectory, then dropped anyway."""
    path = copy_run / "eval" / "trajectories_base.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    loop = dict(rows[0], episode_id="loop")
    call = {"type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": "x" * 1400})}}
    loop["messages"] = [rows[0]["messages"][0]] + [{"role": "assistant", "content": "", "tool_calls": [call] * 20}] * 59
    (copy_run / "eval" / "trajectories_loop.jsonl").write_text(dumps_line(loop))
    limits = ViewerLimits(max_bytes=60_000)
    data = embedded(build_report(copy_run, tmp_path / "page.html", limits).read_text(encoding="utf-8"))
    kept = {s["name"]: len(s["items"]) for s in data["sources"]}
    # every other file keeps what it keeps without the oversized one beside it
    (copy_run / "eval" / "trajectories_loop.jsonl").unlink()
    without = embedded(build_report(copy_run, tmp_path / "without.html", limits).read_text(encoding="utf-8"))
    assert kept.pop("eval: loop") == 0 and kept == {s["name"]: len(s["items"]) for s in without["sources"]}
    assert data["left_out"]["trajectories"] == without["left_out"]["trajectories"] + 1


def test_deeply_nested_json_reads_as_unreadable(copy_run: Path, tmp_path: Path):
    (copy_run / "compose" / "routing_report.json").write_text("[" * 100_000 + "]" * 100_000)
    page = build_report(copy_run).read_text(encoding="utf-8")
    assert "Could not read <code>compose/routing_report.json</code>" in section_html(page, "routing")
    (tmp_path / "deep.jsonl").write_text('{"a": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    loaded = load_jsonl(tmp_path, "deep.jsonl")
    assert loaded.data == [{"a": 1}] and "RecursionError" in loaded.error and loaded.total == 2


def test_the_banner_says_which_run_seed_it_is_from(copy_run: Path):
    page = build_report(copy_run).read_text(encoding="utf-8")
    assert "run seed" not in page.split("</header>")[0]  # a run without extra seeds
    path = copy_run / "replication" / "tables" / "tables.json"
    path.parent.mkdir(parents=True)
    write_json_atomic(path, tables_doc([3, 4, 5]))
    header = build_report(copy_run).read_text(encoding="utf-8").split("</header>")[0]
    assert "(run seed 3 only, from eval/eval.json; the Replication section gives the mean over run seeds 3, 4, 5)" \
        in header
    path.unlink()
    state = json.loads((copy_run / "pipeline.json").read_text())
    state["stages"]["train@s7"] = {"status": "done"}
    write_json_atomic(copy_run / "pipeline.json", state)
    header = build_report(copy_run).read_text(encoding="utf-8").split("</header>")[0]
    assert "(the run&#x27;s own seed only, from eval/eval.json; not its extra run seeds 7)" in header


def test_every_slot_gets_its_own_colour():
    assert len({color(i) for i in range(64)}) == 64
