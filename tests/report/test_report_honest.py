"""The report says what its numbers cover: a damaged held-out file, the routing trace's sample, trained rows over
part of the seeds, a greedy routing order; and `trace-rl report` never writes over a file that is not a report."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.report.test_report import embedded, section_html
from tests.report.test_report_combinations import text_of, write_run
from tests.report.test_report_routing import trace_doc
from trace_train.evaluation.combinations import combination_table
from trace_train.evaluation.replication_table import PolicyRow, build_tables
from trace_train.report import build_report
from trace_train.trajectory import write_json_atomic

ROOT = Path(__file__).resolve().parents[2]


def test_a_damaged_held_out_file_makes_the_combinations_partial(tmp_path: Path):
    write_run(tmp_path / "run")
    base = tmp_path / "run" / "eval" / "trajectories_base.jsonl"
    lines = base.read_text().splitlines(keepends=True)
    lines[9] = lines[9][:200] + "\n"  # one damaged inner line
    base.write_text("".join(lines))
    cut = tmp_path / "run" / "eval" / "trajectories_structured_data_reasoning.jsonl"
    cut.write_text(cut.read_text()[:-300])  # a truncated last line (a crash mid-write)
    page = build_report(tmp_path / "run").read_text(encoding="utf-8")
    text = text_of(page, "combinations")
    assert ("Partial: eval/trajectories_base.jsonl line 10 unreadable (only its 9 episodes before it are in this "
            "table; the file has 40 lines)") in text
    assert "eval/trajectories_structured_data_reasoning.jsonl line 40 unreadable (only its 39 episodes" in text
    assert "the report reads at most the first" not in text
    sources = {s["name"]: s for s in embedded(page)["sources"]}
    assert sources["eval: base"]["total"] == 40 and sources["eval: structured_data_reasoning"]["total"] == 40
    assert "eval: base: 9 of 40" in section_html(page, "viewer")


def test_the_routing_trace_says_how_many_trajectories_its_table_covers(run_dir: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    doc = trace_doc()
    doc["records"] = [dict(doc["records"][i % 2], seed=100 + i) for i in range(20)]
    doc["sample"] = 20
    write_json_atomic(run / "routing" / "routing_trace.json", doc)
    routing = section_html(build_report(run).read_text(encoding="utf-8"), "routing")
    assert "over 20 held-out trajectories" in routing and "; the first 12 of them below." in routing
    assert routing.count("<option value=") == 12


def test_a_trained_row_over_part_of_the_seeds_says_so(run_dir: Path, tmp_path: Path):
    def res(rate: float) -> dict:
        return {"overall": {"rate": rate, "low": rate - 0.03, "high": rate + 0.03, "n": 1000}, "mean_reward": rate}

    rows = [PolicyRow("main", "base", None, res(0.167)), PolicyRow("main", "sft", 1, res(0.35)),
            *(PolicyRow("main", "TRACE (composed)", s, res(0.3)) for s in (0, 1, 2))]
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    write_json_atomic(run / "replication" / "tables" / "tables.json",
                      build_tables(rows, {}, {"TRACE": 3840, "sft": 3840}, [0, 1, 2], 4))
    text = text_of(build_report(run).read_text(encoding="utf-8"), "replication")
    assert "SFT on synthetic successes 0.350 (1 of 3 seeds) seed 1: 0.350 [0.32, 0.38] 3840" in text
    assert "(3 of 3 seeds) seed 0: 0.300 [0.27, 0.33], seed 1: 0.300" in text
    assert "base 0.167 0.167 [0.14, 0.20]" in text  # played once: no seeds


def test_annotation_routing_over_many_adapters_is_greedy_and_fast(tmp_path: Path):
    rng = random.Random(0)
    caps = [f"cap{i}" for i in range(9)]
    records = {p: [{"env_id": "e", "seed": s, "success": rng.random() < 0.3,
                    "info": {"required_capabilities": rng.sample(caps, rng.randint(0, 3))}} for s in range(300)]
               for p in ["base", *caps]}
    t = combination_table(records, ["base", *caps])
    start = time.monotonic()
    order, solved = t.annotation_routing({c: c for c in caps})
    assert time.monotonic() - start < 5 and sorted(order) == caps
    assert solved == sum(cell.successes[next((c for c in order if c in cell.capabilities), "base")]
                         for cell in t.cells)  # what the order it names solves

    policies = write_run(tmp_path / "run")
    state = json.loads((tmp_path / "run" / "pipeline.json").read_text())
    source = tmp_path / "run" / "eval" / "trajectories_base.jsonl"
    for i in range(8 - 2):  # eight adapters in all
        shutil.copy(source, tmp_path / "run" / "eval" / f"trajectories_extra{i}.jsonl")
        state["stages"][f"train/extra{i}"] = {"status": "done"}
    write_json_atomic(tmp_path / "run" / "pipeline.json", state)
    text = text_of(build_report(tmp_path / "run").read_text(encoding="utf-8"), "combinations")
    assert "an order built greedily on these episodes, as 8 adapters have too many orders to try" in text
    assert len(policies) == 4


def _report_cli(run: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trace_train.cli", "report", f"run_dir={run}", *args,
                           f"hydra.run.dir={tmp_path / 'hydra'}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_cli_never_writes_over_a_file_that_is_not_a_report(run_dir: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    eval_json = (run / "eval" / "eval.json").read_bytes()
    proc = _report_cli(run, tmp_path, f"out={run / 'eval' / 'eval.json'}")
    assert proc.returncode == 2 and (run / "eval" / "eval.json").read_bytes() == eval_json
    assert proc.stderr.strip().splitlines() == [
        f"trace-rl report: out={run / 'eval' / 'eval.json'} exists and is not a trace-rl report; it is left as it "
        "is (remove it or choose another out=...)"]
    proc = _report_cli(run, tmp_path, f"out={run / 'eval'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith(f"trace-rl report: out={run / 'eval'} is a directory")
    build_report(run, tmp_path / "r.html")
    proc = _report_cli(run, tmp_path, f"out={tmp_path / 'r.html'}")  # a report: rebuilt in place
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / "r.html")
