"""Review 43's report findings: the bound a router that reads the annotations can reach, why a capability the LLM
env generator rejected got no adapter, and the run's wall time with stages that ran at once."""

from __future__ import annotations

from pathlib import Path

from tests.report.test_report_combinations import text_of
from trace_envs.records import TrajectoryRecord
from trace_train.evaluation import summarize
from trace_train.evaluation.combinations import combination_table
from trace_train.report import build_report
from trace_train.report.loaders import load_run
from trace_train.report.sections_analysis import skipped_capabilities
from trace_train.report.stage_time import elapsed_seconds
from trace_train.trajectory import write_json_atomic, write_trajectories

ENV = "trace/retail-sim-v0"
# (capabilities the tasks need, tasks, successes per policy): adapter A does worse than the base on A's own tasks
CELLS = [((), 10, {"base": 5, "A": 5, "B": 5}),
         (("A",), 10, {"base": 6, "A": 2, "B": 0}),
         (("B",), 10, {"base": 1, "A": 0, "B": 8})]


def _records() -> dict[str, list[TrajectoryRecord]]:
    records: dict[str, list[TrajectoryRecord]] = {p: [] for p in ("base", "A", "B")}
    seed = 0
    for caps, n, solved in CELLS:
        for i in range(n):
            for policy, k in solved.items():
                records[policy].append(TrajectoryRecord(ENV, seed, [], float(i < k), i < k, "done", policy=policy,
                                                        info={"required_capabilities": list(caps)}))
            seed += 1
    return records


def test_the_annotation_ceiling_is_the_best_slot_per_combination_base_included():
    t = combination_table(_records(), ["base", "A", "B"])
    assert t.annotation_ceiling == 6 + 8 + 5 == 19  # needs A -> base, needs B -> B, needs none -> any
    _, routed = t.annotation_routing({"A": "A", "B": "B"})
    assert routed == 15 < t.annotation_ceiling <= t.best_choice  # the priority router is under the ceiling
    assert t.to_dict()["annotation_ceiling"] == 19


def test_the_report_states_the_true_ceiling_and_names_the_priority_router_honestly(tmp_path: Path):
    run = tmp_path / "run"
    records = _records()
    for name, rows in records.items():
        write_trajectories(run / "eval" / f"trajectories_{name}.jsonl", rows)
    write_json_atomic(run / "eval" / "eval.json", {
        "env": ENV, "split": "test", "episodes": 30, "trials": 1,
        "policies": {name: summarize(rows, policy=name).to_dict() for name, rows in records.items()}})
    write_json_atomic(run / "pipeline.json", {"target_env": ENV, "stages": {
        "train/A": {"status": "done", "outputs": {}}, "train/B": {"status": "done", "outputs": {}}}})
    text = text_of(build_report(run).read_text(encoding="utf-8"), "combinations")
    assert ("the best slot for each combination of capabilities (the base included, chosen on these episodes): "
            "19 of 30 (0.633) — the most a router that reads only the annotations can reach") in text
    assert ("Routing by a priority order over the annotations (the adapter of the first capability a task needs "
            "in the order A > B, the base when none; the best order on these episodes): 15 of 30 (0.500).") in text
    assert "the most a router that reads the task can reach" not in text


def test_a_capability_the_llm_generator_rejected_is_not_blamed_on_the_adapter_cap(tmp_path: Path):
    run = tmp_path / "run"
    reason = "no env module accepted in 3 attempts; last failure at static: line 4: import of 'os' is not allowed"
    write_json_atomic(run / "pipeline.json", {
        "target_env": ENV, "config": {"train": {"max_capabilities": 4}},
        "stages": {"synthesis": {"status": "done", "outputs": {
            "envs": {"structured_data_reasoning": "trace/structured-v0"}, "no_family": [], "failed": [],
            "llm": [{"capability": "policy_lookup", "accepted": False, "reason": reason}, "not a record"]}}}})
    why = skipped_capabilities(load_run(run), ["structured_data_reasoning", "policy_lookup", "other"])
    assert why == {"policy_lookup": f"the LLM env generator accepted no env: {reason}",
                   "other": "over the adapter cap pipeline.train.max_capabilities=4: the highest-Δ buildable "
                            "capabilities took the places"}


def test_the_run_s_wall_time_counts_stages_that_ran_at_once_once(tmp_path: Path, load_benchmark):
    # two workers: two 600 s evaluations at once, then the tables for 60 s
    stages = {"replication/eval/a@s1": {"status": "done", "wall_s": 600.0, "spans": [[1000.0, 1600.0]]},
              "replication/eval/b@s1": {"status": "done", "wall_s": 600.0, "spans": [[1000.0, 1600.0]]},
              "replication/tables": {"status": "done", "wall_s": 60.0, "spans": [[1600.0, 1660.0]]}}
    run = tmp_path / "run"
    write_json_atomic(run / "pipeline.json", {"target_env": ENV, "stages": stages})
    page = build_report(run).read_text(encoding="utf-8")
    assert "wall time of the run 660.0 s (stages that ran at once count once)" in page
    assert "1,260.0 s" not in page
    assert load_benchmark("miniature_replication").run_minutes(stages) * 60 == elapsed_seconds(stages) == 660.0


def test_damaged_stage_records_do_not_break_the_wall_time(load_benchmark):
    stages = {"a": {"spans": [[0.0, 60.0], "x", [5.0], [90.0, 30.0], [True, 9.0]]}, "b": "not a record",
              "old": {"wall_s": 120.0}, "bad": {"spans": [["0", "9"]], "wall_s": "ten"}, "running": {"spans": []}}
    assert elapsed_seconds(stages) == 60.0 + 120.0
    assert load_benchmark("miniature_replication").run_minutes(stages) == 3.0  # the same count, not a copy of it
