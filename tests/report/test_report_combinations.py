"""The report's capability-combination section on a run directory with real scripted-expert evaluations."""

from __future__ import annotations

import html
import re
from pathlib import Path

from tests.report.rundir import scripted_records
from trace_envs.retail_sim import ENV_ID, ExpertKnobs, split_seeds
from trace_train.evaluation import summarize
from trace_train.evaluation.combinations import combination_table
from trace_train.report import build_report
from trace_train.trajectory import write_json_atomic, write_trajectories

BASE = ExpertKnobs(precondition=1.0, structured=1.0)
ADAPTERS = {"precondition_verification": ExpertKnobs(precondition=0.0, structured=1.0),
            "structured_data_reasoning": ExpertKnobs(precondition=1.0, structured=0.0)}


def text_of(page: str, sid: str) -> str:
    match = re.search(rf'<section id="{sid}" data-section="{sid}">(.*?)</section>', page, re.S)
    assert match, f"section {sid} missing"
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", match.group(1))))


def write_run(run: Path, with_adapters: bool = True) -> dict:
    seeds = split_seeds("test", 40)
    policies = {"base": scripted_records(BASE, seeds, "base")}
    stages = {"eval": {"status": "done"}}
    if with_adapters:
        for name, knobs in ADAPTERS.items():
            policies[name] = scripted_records(knobs, seeds, name)
            stages[f"train/{name}"] = {"status": "done", "outputs": {"adapter": name}}
            stages[f"train/{name}@s1"] = {"status": "done", "outputs": {"adapter": name}}  # another seed: not a choice
        policies["TRACE (composed)"] = scripted_records(ExpertKnobs(), seeds, "TRACE (composed)")
    for name, records in policies.items():
        write_trajectories(run / "eval" / f"trajectories_{name}.jsonl", records)
    write_json_atomic(run / "eval" / "eval.json", {
        "env": ENV_ID, "split": "test", "episodes": len(seeds), "trials": 1,
        "policies": {name: summarize(records, policy=name).to_dict() for name, records in policies.items()}})
    write_json_atomic(run / "pipeline.json", {"stages": stages, "target_env": ENV_ID})
    return policies


def test_the_section_shows_each_cell_and_the_best_per_episode_choice(tmp_path: Path):
    policies = write_run(tmp_path / "run")
    page = build_report(tmp_path / "run").read_text(encoding="utf-8")
    text = text_of(page, "combinations")
    expected = combination_table(policies, ["base", *ADAPTERS])
    assert expected.best_choice > max(expected.total(p) for p in ["base", *ADAPTERS])
    assert (f"Best per-episode choice among base, precondition_verification, structured_data_reasoning: "
            f"{expected.best_choice} of 40") in text
    assert f"TRACE (composed): {expected.total('TRACE (composed)')} of 40" in text
    order, routed = expected.annotation_routing({a: a for a in ADAPTERS})
    assert f"in the order {' > '.join(order)}, the base when none" in text
    assert f"episodes): {routed} of 40 ({routed / 40:.3f})" in text
    for cell in expected.cells:
        label = " + ".join(cell.capabilities) if cell.capabilities else "(none)"
        counts = " ".join(f"{cell.successes[p]} ({cell.successes[p] / cell.n:.2f})" for p in policies)
        assert f"{label} {cell.n} {counts} {cell.best_choice} ({cell.best_choice / cell.n:.2f})" in text
    assert '<a href="#combinations"' in page


def test_no_section_without_adapters(tmp_path: Path):
    write_run(tmp_path / "run", with_adapters=False)
    page = build_report(tmp_path / "run").read_text(encoding="utf-8")
    assert 'id="combinations"' not in page and '<a href="#combinations"' not in page


def test_a_table_over_part_of_the_episodes_says_so(tmp_path: Path):
    from trace_train.report import render_report
    from trace_train.report.loaders import load_run

    write_run(tmp_path / "run")
    whole = text_of(render_report(load_run(tmp_path / "run")), "combinations")
    assert "Partial" not in whole
    part = text_of(render_report(load_run(tmp_path / "run", trajectory_scan_limit=25)), "combinations")
    assert "Partial: the report reads at most the first 25 episodes" in part
    assert "base 25 of 40" in part and "TRACE (composed) 25 of 40" in part
