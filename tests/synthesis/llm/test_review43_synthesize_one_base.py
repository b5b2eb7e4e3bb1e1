"""``trace-rl synthesize synthesis.generator=llm synthesis.policy.kind=model`` loads the base once: one model
collector calibrates the family envs and the LLM-written ones (it was loaded a second time beside the first)."""

from __future__ import annotations

import json

import trace_train.model
from tests.analysis.llm_server import FakeLLMServer
from tests.cli_runner import run_cli
from trace_train.paths import REPO_ROOT

TINY = REPO_ROOT / "checkpoints" / "retail-sim-tiny"


def test_synthesize_loads_the_base_once(tmp_path, capsys, monkeypatch):
    loads = []
    load_policy = trace_train.model.load_policy
    monkeypatch.setattr(trace_train.model, "load_policy", lambda *a, **k: loads.append(a) or load_policy(*a, **k))
    selected = tmp_path / "selected.json"
    selected.write_text(json.dumps({"selected": [{"name": "transfer_when_stuck", "description": "hand over"}]}))
    with FakeLLMServer(lambda body, n: "no module here") as srv:
        code, out, err = run_cli("synthesize", f"selected={selected}", f"out_dir={tmp_path / 'envs'}",
                                 f"out={tmp_path / 'out'}", "synthesis.generator=llm",
                                 f"synthesis.llm.base_url={srv.base_url}", "synthesis.llm.model=m",
                                 "synthesis.llm.max_attempts=1", "synthesis.policy.kind=model",
                                 f"synthesis.policy.model={TINY}", hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, err
    assert "LLM env generator, transfer_when_stuck" in out
    assert len(loads) == 1
