"""``trace_train.bench.from_run``: the models a pipeline run made, read from its pipeline.json."""

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from trace_train.bench.from_run import run_policies


def _run_dir(tmp_path, stages):
    (tmp_path / "pipeline.json").write_text(json.dumps({"stages": stages}))
    return tmp_path


def test_every_finished_model_stage_becomes_a_policy(tmp_path):
    run = _run_dir(tmp_path, {
        "bootstrap": {"status": "done", "outputs": {"model": "/m/base"}},
        "train/precondition_verification": {"status": "done", "outputs": {"adapter_dir": "/a/prec"}},
        "train/tool_calling_precision": {"status": "failed", "outputs": {"adapter_dir": "/a/prec2"}},
        "compose": {"status": "done", "outputs": {"composed_dir": "/c/composed"}},
        "baselines/grpo_target": {"status": "done", "outputs": {"adapter_dir": "/b/target"}},
        "eval": {"status": "done", "outputs": {}},
    })
    policies = run_policies(run, greedy=True, threads=2)
    assert list(policies) == ["base", "grpo_target", "precondition_verification", "TRACE (composed)"]
    assert policies["base"].adapter is None and policies["base"].model == "/m/base"
    assert policies["precondition_verification"].adapter == "/a/prec"
    assert policies["TRACE (composed)"].kind == "composed" and policies["TRACE (composed)"].adapter == "/c/composed"
    assert all(p.greedy and p.threads == 2 and p.model == "/m/base" for p in policies.values())


def test_a_run_without_a_base_or_a_pipeline_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no pipeline.json"):
        run_policies(tmp_path)
    with pytest.raises(ValueError, match="bootstrap stage is not done"):
        run_policies(_run_dir(tmp_path, {"bootstrap": {"status": "running"}}))
    (tmp_path / "pipeline.json").write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        run_policies(tmp_path)


def test_bench_refuses_run_policies_without_a_run_dir(tmp_path, capsys):
    code, _, err = run_cli("bench", "run_policies=true", "episodes=2", f"out_dir={tmp_path / 'out'}",
                           hydra_dir=tmp_path / "h", capsys=capsys)
    assert code != 0 and "run_policies=true needs run_dir" in err


def test_the_run_s_own_base_is_benched_unless_the_command_line_names_one(tmp_path):
    from hydra import compose, initialize_config_dir

    from trace_train.commands.bench import _checked, named_policies
    from trace_train.paths import CONF_DIR

    shipped = str(Path(__file__).resolve().parents[2] / "checkpoints" / "retail-sim-tiny")
    run = _run_dir(tmp_path, {"bootstrap": {"status": "done", "outputs": {"model": shipped}}})
    (run / "synthesis").mkdir()
    (run / "synthesis" / "manifest.json").write_text(json.dumps({"envs": []}))  # a run that emitted no env
    for extra, base_greedy in (([], True), (["+policies.base.temperature=0.5"], False)):
        overrides = [f"run_dir={run}", "run_policies=true", "episodes=2", *extra]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = compose("bench", overrides=overrides)
        _, _, policies = _checked(cfg, named_policies(overrides))
        assert policies["base"].greedy is base_greedy, extra  # the run's base decodes greedily, as its eval did
    assert named_policies(["+policies.trace={kind: oracle}", "~policies.base", "episodes=3"]) == {"trace", "base"}
