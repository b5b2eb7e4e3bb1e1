"""``trace_train.bench.from_run``: the models a pipeline run made, read from its pipeline.json."""

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from trace_train.bench.from_run import run_policies


def _recorded_config(**policy):
    """``pipeline.json``'s ``config`` as ``trace-rl pipeline`` records it (``asdict`` of a real PipelineConfig)."""
    from dataclasses import asdict

    from trace_train.pipeline.config import PipelineConfig

    return asdict(PipelineConfig.from_dict({"policy": policy}))


def _run_dir(tmp_path, stages, config=None):
    config = _recorded_config() if config is None else config
    (tmp_path / "pipeline.json").write_text(json.dumps({"stages": stages, "config": config}))
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


_STAGES = {"bootstrap": {"status": "done", "outputs": {"model": "/m/base"}},
           "train/precondition_verification": {"status": "done", "outputs": {"adapter_dir": "/a/prec"}},
           "compose": {"status": "done", "outputs": {"composed_dir": "/c/composed"}},
           "baselines/grpo_target": {"status": "done", "outputs": {"adapter_dir": "/b/target"}}}


def test_the_models_are_benched_with_the_run_s_own_policy_settings(tmp_path):
    """The run evaluated with tool schemas in the prompt, 256 new tokens and T = 0.7: the bench plays every model
    so (the same spec the pipeline's eval built), with only the overrides on top."""
    from dataclasses import replace

    from trace_train.pipeline.config import PipelineConfig
    from trace_train.pipeline.policy_play import base_spec

    settings = {"render_tools": True, "max_new_tokens": 256, "temperature": 0.7, "top_p": 0.9, "threads": 3}
    run = _run_dir(tmp_path, _STAGES, _recorded_config(**settings))
    policies = run_policies(run, greedy=True)
    cfg = PipelineConfig.from_dict({"policy": settings})
    want = {"base": base_spec(cfg, "/m/base"),
            "precondition_verification": base_spec(cfg, "/m/base", "precondition_verification", "/a/prec"),
            "grpo_target": base_spec(cfg, "/m/base", "grpo_target", "/b/target"),
            "TRACE (composed)": base_spec(cfg, "/m/base", "TRACE (composed)", "/c/composed", kind="composed")}
    assert policies == {name: replace(spec, greedy=True) for name, spec in want.items()}
    assert all(p.render_tools and p.max_new_tokens == 256 and p.temperature == 0.7 for p in policies.values())
    assert run_policies(run, max_new_tokens=64)["base"].max_new_tokens == 64  # an override wins


def test_a_run_played_through_servers_is_benched_through_them(tmp_path):
    server = {"kind": "openai", "base_urls": ["http://127.0.0.1:8000/v1"], "served_model": "served-base",
              "server": {"timeout": 60.0}, "render_tools": True, "max_new_tokens": 1024}
    policies = run_policies(_run_dir(tmp_path, _STAGES, _recorded_config(**server)))
    for name in ("base", "precondition_verification", "grpo_target"):
        spec = policies[name]
        assert (spec.kind, spec.base_urls, spec.served_model, spec.server) == (
            "openai", ["http://127.0.0.1:8000/v1"], "served-base", {"timeout": 60.0}), name
        assert spec.model == "/m/base" and spec.max_new_tokens == 1024
    composed = policies["TRACE (composed)"]  # the gates run in-process, as in the pipeline
    assert composed.kind == "composed" and composed.base_urls == [] and composed.render_tools


def test_a_run_without_its_recorded_policy_settings_is_refused(tmp_path):
    for config in ({}, {"policy": None}, {"policy": {"render_tools": True}}):
        run = _run_dir(tmp_path, _STAGES, config)
        with pytest.raises(ValueError, match=r"pipeline\.json(: config\.policy| records no config\.policy)") as err:
            run_policies(run)
        assert "\n" not in str(err.value)
    older = {k: v for k, v in _recorded_config(render_tools=True)["policy"].items()
             if k not in ("kind", "base_urls", "served_model", "server")}  # recorded before pipeline.policy.kind
    spec = run_policies(_run_dir(tmp_path, _STAGES, {"policy": older}))["base"]
    assert spec.kind == "hf" and spec.render_tools


def test_the_shared_spec_fields_cover_every_pipeline_policy_setting():
    from dataclasses import fields

    from trace_train.pipeline.config import PolicyStageConfig
    from trace_train.policies import RUN_BACKEND_KEYS, RUN_POLICY_KEYS

    assert sorted(RUN_POLICY_KEYS + RUN_BACKEND_KEYS) == sorted(f.name for f in fields(PolicyStageConfig))


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
