"""moe.train.method=routing_targets in the pipeline: the compose stage plays the target with every slot, and the
target rollouts it played count in TRACE's rollout budget (the sample-efficiency curve); the token gates learn from
the successful episodes, the episode router from each seed's opening request and its target over the slots."""

import json

import numpy as np
import pytest

from trace_envs.records import TrajectoryRecord
from trace_train.paths import shipped_checkpoint
from trace_train.pipeline.gate_targets import routing_target_requests


def _routed_run(run_pipeline, run_dir, *moe_overrides):
    """A one-adapter pipeline run whose composition plays 8 target seeds per slot; returns (stages, compose
    outputs) after checking that it finished and that TRACE's budget counts those 16 episodes."""
    out = run_pipeline(run_dir, shipped_checkpoint("retail-sim-tiny"), "pipeline.baselines=[]",
                       "pipeline.capabilities=[precondition_verification]", "pipeline.report.routing_sample=0",
                       "moe.train.method=routing_targets", "moe.routing.seeds=8", "moe.routing.samples=1",
                       *moe_overrides)
    assert out.returncode == 0, out.stderr[-3000:]
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    compose = stages["compose"]["outputs"]
    assert "skipped" not in compose, compose
    assert compose["routing_targets"]["rollouts"] == 8 * 2 == compose["gate_rollouts"]  # 8 seeds x (base, adapter)
    adapter_rollouts = stages["train/precondition_verification"]["outputs"]["rollouts"]
    curves = json.loads((run_dir / "eval" / "sample_efficiency.json").read_text())["curves"]
    assert curves["TRACE"][0][0] == adapter_rollouts + 16
    return stages, compose


def test_routing_target_gates_play_the_target_and_count_in_traces_budget(run_pipeline, tmp_path):
    _, compose = _routed_run(run_pipeline, tmp_path / "run")
    routing = compose["routing_targets"]
    assert set(routing["slot_mean_reward"]) == {"base", "precondition_verification"}
    assert sum(routing["examples"].values()) > 0


def _played(rewards_per_slot, texts):
    """Records as each slot alone would leave them: slot s earns rewards_per_slot[s][i] on seed i."""
    return [[TrajectoryRecord("trace/retail-sim-v0", seed, [{"role": "system", "content": "rules"},
                                                           {"role": "user", "content": texts[seed]}],
                              float(r), r >= 1.0, "done") for seed, r in enumerate(rewards)]
            for rewards in rewards_per_slot]


def test_episode_router_targets_are_each_seeds_reward_distribution_or_its_best_slot():
    texts = ["cancel #1", "exchange #2", "return #3", "question #4"]
    rewards = [[1, 0, 0, 0],   # base
               [1, 1, 0, 0],   # adapter a
               [0, 1, 0, 1]]   # adapter b
    per_slot = _played(rewards, texts)
    requests, targets, summary = routing_target_requests(per_slot, ["base", "a", "b"], "solvers")
    assert requests == ["cancel #1", "exchange #2", "question #4"]  # seed 2: no slot earned reward
    assert np.allclose(targets, [[0.5, 0.5, 0], [0, 0.5, 0.5], [0, 0, 1]])
    assert summary["rollouts"] == 12 and summary["seeds"] == 4 and summary["seeds_solved"] == 3
    assert summary["target_mass"] == {"base": 0.5, "a": 1.0, "b": 1.5}
    requests, targets, _ = routing_target_requests(per_slot, ["base", "a", "b"], "best")
    assert requests == texts  # every seed; ties go to the slot best on average (a and b: 0.5; a is lower)
    assert targets.argmax(1).tolist() == [1, 1, 1, 2] and np.allclose(targets.sum(1), 1)
    with pytest.raises(ValueError, match="every seed"):
        routing_target_requests([per_slot[0], per_slot[1][:2]], ["base", "a"], "best")


def test_the_episode_router_learns_from_the_targets_routing_targets(run_pipeline, tmp_path):
    run_dir = tmp_path / "run"
    _, compose = _routed_run(run_pipeline, run_dir, "moe.gate.scope=episode", "moe.routing.greedy=true",
                             "moe.routing.label=best")
    routing = compose["routing_targets"]
    assert routing["requests"] == 8 and sum(routing["target_mass"].values()) == 8
    report = json.loads((run_dir / "compose" / "routing_report.json").read_text())
    assert report["scope"] == "episode" and report["episodes"] == 1  # a tenth of 8 distinct requests, at least one
