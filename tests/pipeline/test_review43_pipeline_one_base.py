"""The pipeline's synthesis with ``synthesis.generator=llm`` and ``synthesis.policy.kind=model`` loads its base once:
the families' calibration model also calibrates the LLM-written envs (it was loaded a second time beside it)."""

from __future__ import annotations

import json

import trace_train.model
from tests.analysis.llm_server import FakeLLMServer
from trace_envs.synthesis import SynthesisConfig
from trace_train.paths import REPO_ROOT
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.run import Pipeline

TINY = REPO_ROOT / "checkpoints" / "retail-sim-tiny"


def test_synthesis_loads_the_base_once_for_both_generators(tmp_path, monkeypatch):
    loads = []
    load_policy = trace_train.model.load_policy
    monkeypatch.setattr(trace_train.model, "load_policy", lambda *a, **k: loads.append(a) or load_policy(*a, **k))
    run_dir = tmp_path / "run"
    (run_dir / "analysis").mkdir(parents=True)
    (run_dir / "analysis" / "selected_capabilities.json").write_text(
        json.dumps({"selected": [{"name": "transfer_when_stuck", "description": "hand over"}]}))
    with FakeLLMServer(lambda body, n: "no module here") as srv:
        scfg = SynthesisConfig.from_dict({"generator": "llm", "n_seeds": 2, "group_size": 2,
                                          "policy": {"kind": "model"},
                                          "llm": {"base_url": srv.base_url, "model": "m", "max_attempts": 1,
                                                  "retries": 0}})
        pipe = Pipeline(PipelineConfig.from_dict({"run_dir": str(run_dir)}), None, None, scfg, None, tmp_path)
        out = pipe._synthesis(["transfer_when_stuck"], str(TINY), run_dir / "synthesis")
    assert [r["accepted"] for r in out["llm"]] == [False]  # the LLM stage ran (its answer held no module)
    assert len(loads) == 1
