"""Several targets, per-target env kwargs and the openai rollout backend in the pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rollout.conftest import model, tokenizer  # noqa: F401  (tiny model fixtures)
from tests.rollout_openai.conftest import FAKE_ENV_ID
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.policy_play import base_spec
from trace_train.pipeline.run import Pipeline

RETAIL_SIM, TAU2_RETAIL, TAU2_AIRLINE = "trace/retail-sim-v0", "trace/tau2-retail-v0", "trace/tau2-airline-v0"


def test_single_string_target_keeps_its_rollout_hash():
    """A plain-string target with default policy hashes as before ``policy.kind`` existed."""
    from dataclasses import asdict

    from trace_train.pipeline.policy_play import policy_hash_part

    cfg = PipelineConfig.from_dict({})
    part = policy_hash_part(cfg)
    assert set(part) == set(asdict(cfg.policy)) - {"kind", "base_urls", "served_model", "server"}
    openai = PipelineConfig.from_dict({"policy": {"kind": "openai", "base_urls": ["http://h:1/v1"]}})
    assert policy_hash_part(openai)["kind"] == "openai"


def test_bad_target_config_fails():
    with pytest.raises(ValueError, match="duplicate"):
        PipelineConfig.from_dict({"target_env": [RETAIL_SIM, RETAIL_SIM]})
    with pytest.raises(ValueError, match="task split follows"):
        PipelineConfig.from_dict({"target_env": TAU2_RETAIL,
                                  "target_env_kwargs": [{"id": TAU2_RETAIL, "kwargs": {"split": "base"}}]})
    with pytest.raises(ValueError, match="'hf' or 'openai'"):
        PipelineConfig.from_dict({"policy": {"kind": "vllm"}})


def test_rollouts_use_the_openai_backend_and_the_targets_kwargs(model, tokenizer, tmp_path):  # noqa: F811
    """pipeline.policy.kind=openai: the rollout stage plays through the configured server, with each target's
    gym.make kwargs (here the fake env's ``turns``), and records keep their env id."""
    tokenizer.save_pretrained(tmp_path / "policy")
    with FakeOpenAIServer(model, tokenizer) as srv:
        cfg = PipelineConfig.from_dict({
            "target_env": [FAKE_ENV_ID], "run_dir": str(tmp_path / "run"),
            "target_env_kwargs": [{"id": FAKE_ENV_ID, "kwargs": {"turns": 1}}],
            "rollouts": {"episodes": 2, "batch_episodes": 2, "offset": 0},
            "policy": {"kind": "openai", "base_urls": [srv.base_url], "served_model": "tiny", "max_new_tokens": 4,
                       "server": {"retries": 0}}})
        spec = base_spec(cfg, str(tmp_path / "policy"))
        assert (spec.kind, spec.base_urls, spec.served_model, spec.server) == (
            "openai", [srv.base_url], "tiny", {"retries": 0})
        pipe = Pipeline(cfg, None, None, None, None, tmp_path)
        out = pipe._rollouts(str(tmp_path / "policy"), tmp_path / "run" / "rollouts")
        completions = [body for path, body in srv.log if path.endswith("/completions")]
    assert out["episodes"] == 2 and out["targets"][FAKE_ENV_ID]["episodes"] == 2
    assert completions and all(body["model"] == "tiny" for body in completions)
    rows = [json.loads(x) for x in (tmp_path / "run" / "rollouts" / "trajectories.jsonl").read_text().splitlines()]
    assert {r["env_id"] for r in rows} == {FAKE_ENV_ID}
    # turns=1 reached gym.make: one agent turn per episode (the fake env's default is 3)
    assert all(sum(m["role"] == "assistant" for m in r["messages"]) == 1 for r in rows)


def test_two_targets_end_to_end(tmp_path):  # ~70 s on one core, so not marked slow
    """The scripted-user τ² airline and retail targets in one run: rollouts and analysis on both, every
    capability synthesized on both domains, evaluation per target and overall. (The τ² labeler refuses
    trajectories mixing τ² and other envs, so retail-sim + τ² is not a valid pair.)"""

    policy = _tiny_policy(tmp_path)
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "trace_train.cli", "pipeline", f"pipeline.run_dir={run_dir}",
            f"pipeline.base_model={policy}", f"pipeline.target_env=[{TAU2_AIRLINE},{TAU2_RETAIL}]",
            f"pipeline.target_env_kwargs=[{{id: {TAU2_AIRLINE}, kwargs: {{max_steps: 2}}}},"
            f"{{id: {TAU2_RETAIL}, kwargs: {{max_steps: 2}}}}]",
            "pipeline.capabilities=[precondition_verification]",
            "pipeline.rollouts.episodes=2", "pipeline.rollouts.batch_episodes=2",
            "grpo.iterations=1", "grpo.groups_per_iter=1", "grpo.group_size=2", "grpo.checkpoint_every=1",
            "pipeline.eval.episodes=2", "pipeline.eval.curve_episodes=1", "pipeline.policy.max_new_tokens=12",
            "analysis.n_runs=2", "analysis.k=2", "synthesis.n_seeds=2", "synthesis.group_size=2",
            "synthesis.accept_closest=true", "synthesis.search.stop_when_too_hard=true",
            "pipeline.compose.enabled=false", "pipeline.baselines=[grpo_target,prompted]", "grpo.progress=false"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    assert set(stages["rollouts"]["outputs"]["targets"]) == {TAU2_AIRLINE, TAU2_RETAIL}
    rows = [json.loads(x) for x in (run_dir / "rollouts" / "trajectories.jsonl").read_text().splitlines()]
    assert {r["env_id"] for r in rows} == {TAU2_AIRLINE, TAU2_RETAIL}
    syn = stages["synthesis"]["outputs"]
    assert syn["domains"] == ["tau2-airline", "tau2-retail"]
    mixture = syn["envs"]["precondition_verification"]
    assert isinstance(mixture, dict) and len(mixture) == 2 and {e.split("/")[0] for e in mixture} >= {"trace"}
    assert stages["train/precondition_verification"]["outputs"]["env"] == mixture
    evaluation = json.loads((run_dir / "eval" / "eval.json").read_text())
    assert set(evaluation["targets"]) == {TAU2_AIRLINE, TAU2_RETAIL}
    for name in ("base", "precondition_verification", "grpo_target", "prompted"):
        per = [evaluation["targets"][t][name]["overall"]["n"] for t in (TAU2_AIRLINE, TAU2_RETAIL)]
        assert per == [2, 2] and evaluation["policies"][name]["overall"]["n"] == 4, name
    assert TAU2_RETAIL in (run_dir / "report.html").read_text()


def _tiny_policy(tmp_path: Path) -> Path:
    from trace_train.bootstrap.config import BootstrapConfig
    from trace_train.bootstrap.data import train_tokenizer
    from trace_train.model import build_model, save_policy

    tok = train_tokenizer(BootstrapConfig(tokenizer_episodes=60))
    return save_policy(build_model("tiny", tok, seed=0), tok, tmp_path / "policy" / "tiny")
