"""Which stages a changed routing sample redoes: the hash chain of ``Pipeline.run`` with the stage bodies replaced
by recorders (the chain, the stage runner and ``pipeline.json`` are real; the stage bodies are tested elsewhere)."""

import json
from pathlib import Path

from hydra import compose, initialize_config_dir

import trace_train.pipeline.run as pipeline_run
from trace_train.paths import CONF_DIR
from trace_train.pipeline.config import PipelineConfigs


def _pipeline(run_dir: Path, routing_sample: int, monkeypatch) -> pipeline_run.Pipeline:
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("pipeline", overrides=[f"pipeline.run_dir={run_dir}",
                                             f"pipeline.report.routing_sample={routing_sample}"])
    monkeypatch.setattr(pipeline_run, "resolve_base_model", lambda *args: {"model": "tiny"})
    p = pipeline_run.Pipeline.from_configs(PipelineConfigs.from_hydra(cfg), Path(run_dir))
    p._rollouts = lambda model, out: {}
    p._analysis = lambda out: {"selected": ["precondition_verification"]}
    p._synthesis = lambda caps, model, out: {"envs": {"precondition_verification": "env"}}
    p._register_emitted = lambda: None
    p.train_runs = lambda *args: [pipeline_run.TrainedRun(0, {"precondition_verification": {"rollouts": 8}},
                                                          {"composed_dir": "composed"}, {})]
    p._eval = lambda *args: {"evaluated": True}
    p._routing = lambda model, composed, out: {"sample": routing_sample}
    p._report = lambda out: {"routing_sample_shown": routing_sample}
    return p


def _actions(run_dir: Path) -> dict[str, str]:
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    return {name: stages[name]["last_action"] for name in ("eval", "routing", "report")}


def test_a_new_routing_sample_redoes_the_trace_and_the_report_that_shows_it(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert _pipeline(run_dir, 6, monkeypatch).run() == {"routing_sample_shown": 6}
    assert _pipeline(run_dir, 6, monkeypatch).run() == {"routing_sample_shown": 6}
    assert _actions(run_dir) == {"eval": "skipped", "routing": "skipped", "report": "skipped"}
    assert _pipeline(run_dir, 12, monkeypatch).run() == {"routing_sample_shown": 12}
    assert _actions(run_dir) == {"eval": "skipped", "routing": "ran", "report": "ran"}
