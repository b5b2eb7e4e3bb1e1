"""Builds a realistic run directory built from real code: scripted-expert rollouts on retail-sim, the real
programmatic analysis on them, real eval summaries, real calibration statistics; training metrics and
routing numbers are small hand-written files in the writers' own formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

import trace_envs  # noqa: F401  (registers the envs)
from trace_envs.retail_sim import ENV_ID, ExpertKnobs, ScriptedExpert, split_seeds
from trace_envs.synthesis.calibrate import group_statistics
from trace_moe.routing_report import RoutingReport
from trace_train.analysis.run import run_analysis
from trace_train.evaluation import summarize
from trace_train.grpo.metrics import MetricsLogger
from trace_train.paths import CONF_DIR
from trace_train.rollout.base import EpisodeRequest
from trace_train.rollout.scripted import ScriptedRolloutBackend
from trace_train.trajectory import write_json_atomic, write_trajectories

INJECTION = ('</script><script>document.documentElement.setAttribute("data-pwned","1")</script>'
             "<img src=x onerror=alert(1)>")
IMPERFECT = ExpertKnobs(precondition=0.6, structured=0.5, multi_step=0.5, precision=0.0)


def scripted_records(knobs: ExpertKnobs, seeds: list[int], name: str):
    backend = ScriptedRolloutBackend(lambda s: ScriptedExpert(knobs, seed=s, name=name))
    return backend.rollout([EpisodeRequest(ENV_ID, seed=seed, sample_seed=seed) for seed in seeds])


def build_run_dir(root: Path) -> Path:
    run = root / "run"
    rollouts = scripted_records(IMPERFECT, split_seeds("train", 40), "base")
    write_trajectories(run / "rollouts" / "trajectories.jsonl", rollouts)

    cfg = OmegaConf.load(CONF_DIR / "analysis" / "default.yaml")
    cfg.n_runs, cfg.k = 4, 3
    run_analysis(rollouts, cfg, "programmatic", run / "analysis")

    rng = np.random.default_rng(0)
    envs = []
    for cap, p in (("precondition_verification", 0.4), ("multi_step_task_completion", 0.3)):
        success = rng.random((8, 4)) < p
        stats = group_statistics(success.astype(float), success)
        envs.append({"env_id": f"trace/{cap}-retail_sim-v0", "capability": cap, "domain": "retail_sim",
                     "knobs": {"n_orders": 3}, "calibration": stats.to_dict()})
    write_json_atomic(run / "synthesis" / "manifest.json", {"envs": envs})

    for adapter, slope in (("precondition_verification", 0.04), ("multi_step_task_completion", 0.02)):
        log = MetricsLogger(run / "train" / adapter, tensorboard=False)
        for it in range(8):
            log.log(it, {"reward_mean": 0.3 + slope * it, "success_rate": 0.25 + slope * it,
                         "constant_group_fraction": 0.5 - 0.03 * it, "clip_fraction": 0.01 * it, "entropy": 1.2,
                         "approx_kl": 0.001 * it, "grad_norm": 0.8, "rollout_tokens_per_s": 900.0,
                         "format_valid": 0.98})

    routing = RoutingReport(slot_names=["base", "precondition_verification", "multi_step_task_completion"],
                            num_tokens=1234, token_accuracy=0.71, episode_accuracy=0.83, load=[0.2, 0.45, 0.35],
                            load_per_layer=[[0.2, 0.5, 0.3], [0.2, 0.4, 0.4]], entropy=0.61, collapsed=False)
    write_json_atomic(run / "compose" / "routing_report.json", routing.to_dict())

    test_seeds = split_seeds("test", 12)
    policies = {"base": scripted_records(IMPERFECT, test_seeds, "base"),
                "oracle": scripted_records(ExpertKnobs(), test_seeds, "oracle")}
    # Hostile content in a trajectory: it must be shown as text, never run.
    first = policies["base"][0]
    first.messages.append({"role": "user", "content": f"hello {INJECTION}"})
    first.messages.append({"role": "assistant", "content": "",
                           "tool_calls": [{"id": "c9", "type": "function", "function": {
                               "name": "get_order_details", "arguments": json.dumps({"order_id": INJECTION})}}]})
    for name, records in policies.items():
        write_trajectories(run / "eval" / f"trajectories_{name}.jsonl", records)
    write_json_atomic(run / "eval" / "eval.json", {
        "env": ENV_ID, "split": "test", "episodes": len(test_seeds), "trials": 1,
        "policies": {name: summarize(records, policy=name).to_dict() for name, records in policies.items()}})
    write_json_atomic(run / "eval" / "sample_efficiency.json", {"curves": {
        "TRACE": [[0, 0.3, 0.2, 0.4], [200, 0.45, 0.35, 0.55], [400, 0.6, 0.5, 0.7]],
        "GRPO (target)": [[0, 0.3, 0.2, 0.4], [200, 0.35, 0.25, 0.45], [400, 0.4, 0.3, 0.5]]}})

    write_json_atomic(run / "pipeline.json", {
        "target_env": ENV_ID,
        "config": {"preset": "quick", "note": INJECTION},
        "stages": {"rollout": {"status": "done", "wall_s": 3.2, "hash": "abc123"},
                   "analyze": {"status": "done", "wall_s": 1.1, "hash": "def456"},
                   "synthesize": {"status": "done", "wall_s": 12.5, "hash": "0a0b"},
                   "train": {"status": "done", "wall_s": 140.0, "hash": "77"},
                   "compose": {"status": "done", "wall_s": 30.0, "hash": "88"},
                   "eval": {"status": "done", "wall_s": 20.0, "hash": "99"},
                   "report": {"status": "running", "wall_s": 0.0, "hash": "aa"}}})
    return run
