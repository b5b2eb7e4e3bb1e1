"""The pipeline end to end on a tiny budget: every stage runs, a rerun skips them all, force redoes one."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_pipeline_runs_caches_and_forces(tiny_policy, run_pipeline, tmp_path):
    run_dir = tmp_path / "run"
    out = run_pipeline(run_dir, tiny_policy)
    assert out.returncode == 0, out.stderr[-3000:]
    state = json.loads((run_dir / "pipeline.json").read_text())
    stages = state["stages"]
    for name in ("bootstrap", "rollouts", "analysis", "synthesis", "train/precondition_verification",
                 "train/multi_step_task_completion", "baselines/grpo_target", "baselines/mixture", "baselines/sft",
                 "eval", "report"):
        assert stages[name]["status"] == "done", name
    assert stages["bootstrap"]["outputs"]["source"] == "given"
    assert (run_dir / "rollouts" / "trajectories.jsonl").exists()
    assert (run_dir / "analysis" / "selected_capabilities.json").exists()
    manifest = json.loads((run_dir / "synthesis" / "manifest.json").read_text())
    assert {e["capability"] for e in manifest["envs"]} == {"precondition_verification", "multi_step_task_completion"}
    assert stages["synthesis"]["outputs"]["calibrated_with"] == "model"
    assert all(e["search_trials"] == 1 and not e["passed_gate"] for e in manifest["envs"])
    evaluation = json.loads((run_dir / "eval" / "eval.json").read_text())
    assert {"base", "precondition_verification", "multi_step_task_completion", "grpo_target", "mixture", "sft",
            "prompted"} <= set(evaluation["policies"])
    # every trained baseline gets TRACE's rollout budget: two capabilities x 1 iteration x 2 groups x 2
    for name in ("grpo_target", "mixture", "sft"):
        assert stages[f"baselines/{name}"]["outputs"]["rollouts"] == 8, name
    prompted_file = run_dir / "eval" / "trajectories_prompted.jsonl"
    prompted = [json.loads(line) for line in prompted_file.read_text().splitlines()]
    assert "Be careful with:" in prompted[0]["messages"][0]["content"]
    assert evaluation["policies"]["base"]["overall"]["n"] == 3
    curves = json.loads((run_dir / "eval" / "sample_efficiency.json").read_text())["curves"]
    # TRACE's point is the composed model's, and there is none without one (it was the base's score before)
    assert ("TRACE" in curves) == ("TRACE (composed)" in evaluation["policies"])
    if "TRACE" in curves:
        assert curves["TRACE"][0][1] == evaluation["policies"]["TRACE (composed)"]["overall"]["rate"]
    assert len(curves["GRPO on target"]) == 2
    assert (run_dir / "report.html").stat().st_size > 10_000
    # A rerun with the same config skips every stage but the report.
    again = run_pipeline(run_dir, tiny_policy)
    assert again.returncode == 0, again.stderr[-3000:]
    state = json.loads((run_dir / "pipeline.json").read_text())
    assert all(s["last_action"] == "skipped" for n, s in state["stages"].items() if n != "report")
    # force=eval redoes the evaluation only.
    forced = run_pipeline(run_dir, tiny_policy, "pipeline.force=[eval]")
    assert forced.returncode == 0, forced.stderr[-3000:]
    state = json.loads((run_dir / "pipeline.json").read_text())
    assert state["stages"]["eval"]["last_action"] == "ran"
    assert state["stages"]["rollouts"]["last_action"] == "skipped"


def test_bad_pipeline_config_fails_fast(tmp_path):
    out = subprocess.run([sys.executable, "-m", "trace_train.cli", "pipeline", f"pipeline.run_dir={tmp_path}",
                          "pipeline.baselines=[nonsense]"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown baselines" in out.stdout + out.stderr


@pytest.mark.parametrize("content, message", [("[]", "is not a pipeline state"), ("{bad", "is not readable JSON")])
def test_a_damaged_pipeline_state_is_named_and_kept(tmp_path, content, message):
    state = tmp_path / "pipeline.json"
    state.write_text(content)
    out = subprocess.run([sys.executable, "-m", "trace_train.cli", "pipeline", f"pipeline.run_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    text = (out.stdout + out.stderr).replace("\n", " ")
    assert out.returncode == 2 and f"{state}" in text and message in text and "Traceback" not in text, text
    assert state.read_text() == content
    assert {p.name for p in tmp_path.iterdir()} <= {"pipeline.json", ".hydra_logs"}  # no stage ran
