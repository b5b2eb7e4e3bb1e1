"""The pipeline with synthesis.generator=llm: a capability no env family builds (transfer_when_stuck) goes to
the LLM env generator (a local fake OpenAI-compatible server serving a good module); the env is emitted
into the run directory, registered, trained, and listed in the report with its provenance."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "synthesis" / "llm"))
from fake_llm import FakeLLM  # noqa: E402
from llm_env_modules import GOOD, answer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "checkpoints" / "retail-sim-tiny"
WIDE_GATE = ["synthesis.gate.reward_min=0.0", "synthesis.gate.reward_max=1.0", "synthesis.gate.success_min=0.0",
             "synthesis.gate.success_max=1.0", "synthesis.gate.min_std=0.0", "synthesis.gate.max_all_success=1.0",
             "synthesis.gate.max_all_zero=1.0", "synthesis.gate.max_constant=1.0"]


def _pipeline(run_dir: Path, *extra: str):
    args = [
        sys.executable, "-m", "trace_train.cli", "pipeline", f"pipeline.run_dir={run_dir}",
        f"pipeline.base_model={TINY}", "pipeline.capabilities=[transfer_when_stuck]",
        "pipeline.rollouts.episodes=4", "pipeline.rollouts.batch_episodes=4",
        "grpo.iterations=1", "grpo.groups_per_iter=1", "grpo.group_size=2", "grpo.checkpoint_every=1",
        "pipeline.compose.enabled=false", "pipeline.baselines=[]",
        "pipeline.eval.episodes=2", "pipeline.eval.curve_episodes=1", "pipeline.policy.max_new_tokens=8",
        "pipeline.policy.threads=1", "analysis.n_runs=2", "analysis.k=2", "synthesis.n_seeds=2",
        "synthesis.group_size=2", "synthesis.policy.kind=model", "grpo.progress=false",
        "synthesis.llm.model=fake-coder", "synthesis.llm.retries=0", "synthesis.llm.timeout_s=30",
        "synthesis.llm.validation.n_seeds=60", "synthesis.llm.validation.baseline_seeds=20", *WIDE_GATE, *extra,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=run_dir.parent)


@pytest.mark.slow
def test_llm_env_is_emitted_registered_trained_and_reported(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLM([answer(GOOD)]) as llm:
        out = _pipeline(run_dir, "synthesis.generator=llm", f"synthesis.llm.base_url={llm.base_url}")
        n_requests = len(llm.requests)
    assert out.returncode == 0, out.stderr[-3000:]
    assert n_requests == 1
    state = json.loads((run_dir / "pipeline.json").read_text())
    syn = state["stages"]["synthesis"]["outputs"]
    assert syn["envs"] == {"transfer_when_stuck": "trace/transfer_when_stuck-v0"}
    assert syn["no_family"] == [] and syn["llm"][0]["accepted"]
    (row,) = json.loads((run_dir / "synthesis" / "manifest.json").read_text())["envs"]
    assert row["generator"] == "llm" and row["provenance"]["model"] == "fake-coder"
    assert row["provenance"]["source_run"] == str(run_dir.resolve())
    train = state["stages"]["train/transfer_when_stuck"]
    assert train["status"] == "done" and train["outputs"]["env"] == "trace/transfer_when_stuck-v0"
    assert Path(train["outputs"]["adapter_dir"], "adapter_model.safetensors").exists()
    report = (run_dir / "report.html").read_text()
    assert "trace/transfer_when_stuck-v0" in report and "LLM-written by fake-coder" in report


@pytest.mark.slow
def test_template_generator_still_skips_it(tmp_path):
    run_dir = tmp_path / "run"
    out = _pipeline(run_dir, "synthesis.generator=template", "pipeline.force=[]")
    assert out.returncode == 0, out.stderr[-3000:]
    syn = json.loads((run_dir / "pipeline.json").read_text())["stages"]["synthesis"]["outputs"]
    assert syn["envs"] == {} and syn["no_family"] == ["transfer_when_stuck"] and syn["llm"] == []
    assert "train/transfer_when_stuck" not in json.loads((run_dir / "pipeline.json").read_text())["stages"]
