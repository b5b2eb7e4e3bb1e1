"""moe.train.method=routing_targets in the pipeline: the compose stage plays the target with every slot, and the
target rollouts it played count in TRACE's rollout budget (the sample-efficiency curve)."""

import json

from trace_train.paths import shipped_checkpoint


def test_routing_target_gates_play_the_target_and_count_in_traces_budget(run_pipeline, tmp_path):
    run_dir = tmp_path / "run"
    out = run_pipeline(run_dir, shipped_checkpoint("retail-sim-tiny"), "pipeline.baselines=[]",
                       "pipeline.capabilities=[precondition_verification]", "pipeline.report.routing_sample=0",
                       "moe.train.method=routing_targets", "moe.routing.seeds=8", "moe.routing.samples=1")
    assert out.returncode == 0, out.stderr[-3000:]
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    compose = stages["compose"]["outputs"]
    assert "skipped" not in compose, compose
    routing = compose["routing_targets"]
    assert routing["rollouts"] == 8 * 2 == compose["gate_rollouts"]  # 8 seeds x (base, one adapter)
    assert set(routing["slot_mean_reward"]) == {"base", "precondition_verification"}
    assert sum(routing["examples"].values()) > 0
    adapter_rollouts = stages["train/precondition_verification"]["outputs"]["rollouts"]
    curves = json.loads((run_dir / "eval" / "sample_efficiency.json").read_text())["curves"]
    assert curves["TRACE"][0][0] == adapter_rollouts + 16
