"""The LLM env generator end to end against a local fake OpenAI-compatible server (canned answers):
a good module is accepted, emitted, registered and trained for one GRPO iteration on the shipped tiny
base; a syntax error is fed back and fixed on attempt 2; a calibration failure is fed back too."""

import json
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from fake_llm import FakeLLM
from llm_env_modules import GOOD, SYNTAX_ERROR, answer

import trace_envs  # noqa: F401
from trace_envs.synthesis import SelectedCapability, SynthesisConfig
from trace_envs.synthesis.llm.loader import sha256_text

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "checkpoints" / "retail-sim-tiny"
CAP = SelectedCapability("transfer_when_stuck", "hand over to a human when no tool can serve the request",
                         mean_cov=0.4, mean_delta=0.5, n_runs_passed=9)
WIDE_GATE = {"reward_min": 0.0, "reward_max": 1.0, "success_min": 0.0, "success_max": 1.0, "min_std": 0.0,
             "max_all_success": 1.0, "max_all_zero": 1.0, "max_constant": 1.0}


def config(base_url: str, wide_gate: bool = True, **llm) -> SynthesisConfig:
    """The shipped defaults with the LLM generator on; ``wide_gate`` opens the gate (the tiny base's rewards)."""
    doc = yaml.safe_load((REPO / "conf" / "synthesis" / "default.yaml").read_text())
    doc.update(generator="llm", n_seeds=2, group_size=2)
    if wide_gate:
        doc["gate"] = WIDE_GATE
    doc["policy"].update(kind="model", model=str(TINY))
    doc["llm"].update(base_url=base_url, model="fake-coder", retries=0, timeout_s=30, **llm)
    doc["llm"]["validation"].update(n_seeds=60, baseline_seeds=20)
    return SynthesisConfig.from_dict(doc)


def tiny_collector():
    from trace_train.calibration import model_collector
    from trace_train.policies import PolicySpec

    return model_collector(PolicySpec(kind="hf", name="calibration", model=str(TINY), max_new_tokens=8))


def test_good_module_is_accepted_registered_and_trained(tmp_path):
    from trace_train.grpo import GRPOConfig, GRPOTrainer
    from trace_train.grpo.lora import LoraSettings
    from trace_train.model import load_policy
    from trace_train.rollout.hf import HFRolloutBackend
    from trace_train.synthesis.generator import synthesize_llm

    out = tmp_path / "envs"
    with FakeLLM([answer(GOOD)]) as llm:
        (result,) = synthesize_llm([CAP], config(llm.base_url), out, tiny_collector())
        prompt = llm.requests[0]["messages"][1]["content"]
    assert result.accepted, result.reason
    assert len(result.attempts) == 1 and result.attempts[0].stage == "accepted"
    # the prompt carries the capability, the target's tool schemas and policy
    assert "transfer_when_stuck" in prompt and '"find_user_id_by_email"' in prompt and "store support agent" in prompt
    env_id = result.entry["env_id"]
    assert env_id == "trace/transfer_when_stuck-v0" and env_id in gym.registry
    row = next(e for e in json.loads((out / "manifest.json").read_text())["envs"] if e["env_id"] == env_id)
    assert row["generator"] == "llm" and row["provenance"]["model"] == "fake-coder"
    assert row["source_sha256"] == sha256_text(GOOD.strip("\n") + "\n")
    assert row["provenance"]["validation"]["policies"]["oracle"]["success_rate"] == 1.0
    kept = json.loads((out / "llm_attempts" / "transfer_when_stuck" / "attempt_1.json").read_text())
    assert kept["prompt_sha256"] == result.attempts[0].prompt_sha256 and "```python" in kept["response"]

    env = gym.make(env_id)
    obs, info = env.reset(seed=3)
    assert info["task"]["generator"] == "llm" and "email" in obs[0]["content"]
    env.close()

    model, tokenizer = load_policy(str(TINY))
    gcfg = GRPOConfig(iterations=1, groups_per_iter=1, group_size=2, max_new_tokens=6, checkpoint_every=1,
                      threads=1, tensorboard=False, progress=False, lora=LoraSettings(r=4, alpha=8))
    trainer = GRPOTrainer(model, lambda m: HFRolloutBackend(m, tokenizer, threads=1, policy_name="cap"), gcfg,
                          env=env_id, adapter="cap", output_dir=tmp_path / "grpo",
                          pad_id=tokenizer.pad_token_id or 0)
    trained = trainer.train()
    assert (trained.adapter_dir / "adapter_model.safetensors").exists()
    rows = (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and "reward_mean" in json.loads(rows[0])


def test_syntax_error_then_fixed_on_attempt_two(tmp_path):
    from trace_train.synthesis.generator import synthesize_llm

    collected = []

    def collector(env_id, kwargs, seeds, group_size, **_):
        collected.append(env_id)
        return np.tile([0.0, 1.0], (len(seeds), 1)), np.tile([False, True], (len(seeds), 1))

    with FakeLLM([answer(SYNTAX_ERROR), answer(GOOD, "Fixed.")]) as llm:
        (result,) = synthesize_llm([CAP], config(llm.base_url, wide_gate=False), tmp_path / "envs", collector)
        second = llm.requests[1]["messages"]
    assert result.accepted, result.reason
    assert [a.stage for a in result.attempts] == ["static", "accepted"]
    assert [a.index for a in result.attempts] == [1, 2]
    assert result.attempts[0].prompt_sha256 != result.attempts[1].prompt_sha256
    # the failure went back to the LLM: its own answer, then which check failed and why
    assert second[-2] == {"role": "assistant", "content": answer(SYNTAX_ERROR)}
    assert "static check" in second[-1]["content"] and "syntax error at line" in second[-1]["content"]
    for i in (1, 2):
        assert (tmp_path / "envs" / "llm_attempts" / "transfer_when_stuck" / f"attempt_{i}.json").exists()
    assert collected == ["trace/transfer_when_stuck-llm-candidate-v0"]  # only the valid module was calibrated


def test_calibration_failure_goes_back_then_budget_runs_out(tmp_path):
    from trace_train.synthesis.generator import synthesize_llm

    def too_easy(env_id, kwargs, seeds, group_size, **_):
        return np.ones((len(seeds), group_size)), np.ones((len(seeds), group_size), dtype=bool)

    cfg = config("http://unused", wide_gate=False, max_attempts=2)
    with FakeLLM([answer(GOOD)]) as llm:
        cfg = replace(cfg, llm=replace(cfg.llm, base_url=llm.base_url))
        (result,) = synthesize_llm([CAP], cfg, tmp_path / "envs", too_easy)
        feedback = llm.requests[1]["messages"][-1]["content"]
    assert not result.accepted and [a.stage for a in result.attempts] == ["calibration", "calibration"]
    assert "too easy" in feedback and "success rate 1.000 outside [0.2, 0.6]" in feedback
    assert "no module accepted in 2 attempts" in result.reason
    assert not (tmp_path / "envs" / "manifest.json").exists()


def test_scripted_calibration_policy_is_refused(tmp_path):
    from trace_train.synthesis.generator import synthesize_llm

    with pytest.raises(ValueError, match="calibrates against a model"):
        synthesize_llm([CAP], config("http://127.0.0.1:9/v1"), tmp_path, None)


def test_real_endpoint_opt_in(request, tmp_path):
    """Runs only with ``--synthesis.llm.base_url=URL``: a real model writes the env (5 attempts)."""
    base_url = request.config.getoption("synthesis_llm_base_url", default=None)
    if not base_url:
        pytest.skip("opt-in: pass --synthesis.llm.base_url=<OpenAI-compatible endpoint> to run it")
    from trace_train.synthesis.generator import synthesize_llm

    cfg = config(base_url)
    cfg = replace(cfg, llm=replace(cfg.llm, model=request.config.getoption("synthesis_llm_model", default=""),
                                   api_key=request.config.getoption("synthesis_llm_api_key", default="EMPTY"),
                                   timeout_s=600, retries=2))
    (result,) = synthesize_llm([CAP], cfg, tmp_path / "envs", tiny_collector())
    assert result.attempts and all(a.response for a in result.attempts)
    assert result.accepted, result.reason
