"""``trace-rl synthesize synthesis.generator=llm`` in-process against the fake OpenAI-compatible server."""

import json
from pathlib import Path

from fake_llm import FakeLLM
from llm_env_modules import GOOD, answer

from tests.cli_runner import run_cli

TINY = Path(__file__).resolve().parents[3] / "checkpoints" / "retail-sim-tiny"


def test_synthesize_command_builds_the_capability_no_family_builds(tmp_path, capsys):
    selected = tmp_path / "selected.json"
    selected.write_text(json.dumps({"selected": [{"name": "transfer_when_stuck", "description": "hand over"}]}))
    gate = ["synthesis.gate.reward_min=0", "synthesis.gate.success_min=0", "synthesis.gate.min_std=0",
            "synthesis.gate.max_all_zero=1", "synthesis.gate.max_constant=1"]
    with FakeLLM([answer(GOOD)]) as llm:
        code, out, _ = run_cli("synthesize", f"selected={selected}", f"out_dir={tmp_path / 'envs'}",
                               f"out={tmp_path / 'out'}", "synthesis.generator=llm",
                               f"synthesis.llm.base_url={llm.base_url}", "synthesis.llm.model=fake-coder",
                               "synthesis.policy.kind=model", f"synthesis.policy.model={TINY}",
                               "synthesis.n_seeds=2", "synthesis.group_size=2",
                               "synthesis.llm.validation.n_seeds=40", "synthesis.llm.validation.baseline_seeds=10",
                               *gate, hydra_dir=tmp_path / "hydra", capsys=capsys)
    assert code == 0, out
    assert "accepted on attempt 1" in out and "trace/transfer_when_stuck-v0" in out
    report = json.loads((tmp_path / "out" / "synthesis_report.json").read_text())
    assert report["llm"][0]["accepted"] and report["llm"][0]["env_id"] == "trace/transfer_when_stuck-v0"
    manifest = json.loads((tmp_path / "envs" / "manifest.json").read_text())
    assert [e["generator"] for e in manifest["envs"]] == ["llm"]
