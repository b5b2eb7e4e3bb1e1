"""The CLI's guards found by review: one-line refusals (exit 2, no traceback, nothing loaded, no folder left),
``-m`` sweeps whose jobs would share one output, results dirs that already hold results (``if_exists``), a
manifest row replaced by one calibrated otherwise, booleans, and ``--help`` showing the composed defaults."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest

from trace_train import cli


def _run(args: list[str]) -> int:
    argv, code = list(sys.argv), 0
    try:
        cli.main(args)
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    return code


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Files the commands need besides the bad key: oracle trajectories, a fake base / adapter, a plain file."""
    root = tmp_path_factory.mktemp("inputs")
    argv = list(sys.argv)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        cli.main(["rollout", "policy=oracle", "episodes=6", f"out={root}/traj.jsonl", f"hydra.run.dir={root}/h"])
    except SystemExit as exc:
        assert not exc.code
    finally:
        sys.argv = argv
        os.chdir(cwd)
    (root / "selected.json").write_text(json.dumps({"selected": []}))
    (root / "base").mkdir()
    (root / "base" / "config.json").write_text("{}")
    (root / "adapter").mkdir()
    (root / "adapter" / "adapter_config.json").write_text("{}")
    (root / "data.jsonl").write_text("")
    (root / "afile").write_text("not a directory\n")
    return root


COMPOSE = ["base={in}/base", "adapters=[{in}/adapter]", "data={in}/data.jsonl"]
TRAIN = ["env=trace/precondition_verification-v0", "adapter=a"]
ANALYZE = ["trajectories={in}/traj.jsonl", "out=analysis_out"]

# (command, overrides, what the one error line must name); {in} is the inputs directory
CASES = [
    ("pipeline", ["pipeline.shipped_checkpoint=nope-ckpt"], "pipeline.shipped_checkpoint=nope-ckpt"),
    ("pipeline", ["pipeline.policy.temperature=-1"], "pipeline.policy.temperature"),
    ("pipeline", ["pipeline.run_dir={in}/afile"], "pipeline.run_dir"),
    ("calibrate", ["env=trace/retail-sim-v0", "search=true"], "search=true"),
    ("calibrate", ["search=no"], "search"),
    ("calibrate", ["synthesis.policy.kind=model"], "synthesis.policy.model"),
    ("calibrate", ["synthesis.policy.kind=model", "synthesis.policy.model=/nonexistent"], "synthesis.policy.model"),
    ("calibrate", ["+env_kwargs.bogus=1"], "bogus"),
    ("synthesize", ["selected={in}/selected.json", "synthesis.policy.kind=model",
                    "synthesis.policy.model=/nonexistent"], "synthesis.policy.model"),
    ("expert", ["+env_kwargs.bogus=1"], "bogus"),
    ("expert", ["+policies.x={kind: expert, knobs: {precondition: 2}}"], "policies.x.knobs"),
    ("eval", ["+env_kwargs.bogus=1"], "bogus"),
    ("eval", ["~policies.base"], "policies"),
    ("eval", ["+policies.x={kind: expert, knobs: {nope: 0.5}}"], "policies.x.knobs"),
    ("bench", ["+policies.x={kind: expert, knobs: {precondition: 2}}"], "policies.x.knobs"),
    ("bench", ["seed=abc"], "seed"),
    ("bench", ["seed=1.5"], "seed"),
    ("bench", ["run_greedy=no"], "run_greedy"),
    ("rollout", ["env_kwargs=abc"], "env_kwargs"),
    ("rollout", ["policy=hf", "policy.temperature=-1"], "policy.temperature"),
    ("train", [*TRAIN, "+env_kwargs.bogus=1"], "bogus"),
    ("train", ["env=trace/precondition_verification-v0", "adapter=a/b"], "adapter"),
    ("train", [*TRAIN, "model.dtype=float64x"], "model.dtype"),
    ("train", [*TRAIN, "resume=no"], "resume"),
    ("train", [*TRAIN, "model=small"], "model.preset"),
    ("compose", [*COMPOSE, "eval_episodes=1", "eval_split=foo"], "eval_split"),
    ("compose", [*COMPOSE, "only_successful=no"], "only_successful"),
    ("analyze", [*ANALYZE, "analysis.programmatic.capabilities=[nope]"], "analysis.programmatic.capabilities"),
    ("analyze", [*ANALYZE, "analysis.programmatic.domain=nope"], "retail_sim"),
    ("analyze", [*ANALYZE, "labeler=llm", "analysis.llm.capabilities_file=/nonexistent"],
     "analysis.llm.capabilities_file"),
    ("analyze", [*ANALYZE, "labeler=llm", "analysis.llm.timeout=-5"], "analysis.llm.timeout"),
    ("analyze", [*ANALYZE, "analysis.delta=-1.5"], "analysis.delta"),
    ("bootstrap", ["cache_dir={in}/afile"], "cache_dir"),
]


@pytest.mark.parametrize(("command", "overrides", "named"), CASES, ids=[f"{c}-{o[-1]}" for c, o, _ in CASES])
def test_refused_in_one_line(command, overrides, named, inputs, tmp_path, monkeypatch, capsys, no_model_load):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code = _run([command, *[o.replace("{in}", str(inputs)) for o in overrides]])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err + captured.out
    assert len(lines) == 1 and lines[0].startswith(f"trace-rl {command}: "), captured.err
    assert named in lines[0], lines[0]
    assert os.listdir(tmp_path) in ([], ["home"]), f"left behind: {os.listdir(tmp_path)}"  # no out folder either


def test_a_negative_delta_is_accepted_as_analysis_config_accepts_it(inputs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = _run(["analyze", f"trajectories={inputs}/traj.jsonl", "out=o", "analysis.delta=-0.1", "analysis.n_runs=2",
                 "analysis.k=1", f"hydra.run.dir={tmp_path}/h"])
    assert code in (0, None), capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "selected_capabilities.json").read_text())["thresholds"]["delta"] == -0.1


def test_bench_takes_one_env_as_a_string(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = _run(["bench", "envs=trace/retail-sim-v0", "policies.base={kind: oracle}", "episodes=1", "n_boot=10",
                 "out_dir=b", f"hydra.run.dir={tmp_path}/h"])
    assert code in (0, None), capsys.readouterr().err
    assert json.loads((tmp_path / "b" / "bench.json").read_text())["envs"] == ["trace/retail-sim-v0"]


# --- -m sweeps ---------------------------------------------------------------------------------------------------

SWEEPS = [
    ("pipeline", ["preset=smoke", "pipeline.run_dir={tmp}/run", "grpo.lr=1e-3,2e-3"], "pipeline.run_dir"),
    ("train", [*TRAIN, "grpo.iterations=1", "grpo.lr=1e-3,2e-3"], "output_dir"),
    ("analyze", ["trajectories={in}/traj.jsonl", "analysis.n_runs=2", "analysis.k=1", "analysis.delta=0.1,0.3",
                 "out=fixed"], "out"),
    ("synthesize", ["selected={in}/selected.json", "synthesis.n_seeds=1,2"], "out_dir"),
    ("calibrate", ["synthesis.n_seeds=1,2", "synthesis.group_size=2", "out=fixed"], "out"),
    # a swept group whose options leave the output alone (both grpo options keep the default run_dir)
    ("pipeline", ["grpo=default,paper"], "pipeline.run_dir"),
    # a Hydra flag's value is not an override (it made the parse fail and the check pass)
    ("analyze", ["--config-name", "analyze", "trajectories={in}/traj.jsonl", "analysis.n_runs=2", "analysis.k=1",
                 "analysis.delta=0.1,0.3", "out=fixed"], "out"),
]


@pytest.mark.parametrize(("command", "overrides", "key"), SWEEPS, ids=[c for c, _, _ in SWEEPS])
def test_a_sweep_whose_jobs_share_one_output_is_refused(command, overrides, key, inputs, tmp_path, monkeypatch,
                                                        capsys, no_model_load):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    args = [o.replace("{in}", str(inputs)).replace("{tmp}", str(tmp_path)) for o in overrides]
    code = _run([command, "-m", *args, f"hydra.sweep.dir={tmp_path}/sweep"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"trace-rl {command}: {key}=" in err and "-m sweep" in err and "hydra:" in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "fixed").exists()


@pytest.mark.parametrize("run_dir", [[], ["pipeline.run_dir=runs/${hydra:runtime.choices.preset}"]])
def test_a_preset_sweep_gives_each_job_its_own_run_dir(run_dir, tmp_path, monkeypatch, capsys, no_model_load):
    """smoke sets runs/smoke, quick keeps the default runs/quick: the sweep check lets it through (the job then
    stops on the bad count given to stop it before any work)."""
    monkeypatch.chdir(tmp_path)
    code = _run(["pipeline", "-m", "preset=smoke,quick", *run_dir, "pipeline.rollouts.episodes=0",
                 f"hydra.sweep.dir={tmp_path}/sweep"])
    err = capsys.readouterr().err
    assert code == 2 and "pipeline.rollouts.episodes" in err and "-m sweep" not in err, err


def test_a_sweep_over_its_own_output_runs(inputs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = _run(["calibrate", "-m", "synthesis.n_seeds=1", "synthesis.group_size=2",
                 "out=cal/${hydra:job.num}", "+env_kwargs.refuse_fraction=0.5,0.9", f"hydra.sweep.dir={tmp_path}/s"])
    assert code in (0, None), capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "cal").iterdir()) == ["0", "1"]


def test_a_calibrate_sweep_records_a_failed_gate_and_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = _run(["calibrate", "-m", "synthesis.n_seeds=2", "synthesis.group_size=2",
                 "+env_kwargs.refuse_fraction=0.5,0.9,0.95", f"hydra.sweep.dir={tmp_path}/s"])
    err = capsys.readouterr().err
    assert code == 1 and "jobs of this sweep failed" in err, err  # the sweep went on, then said which jobs failed
    docs = [json.loads((tmp_path / "s" / str(i) / "calibration.json").read_text()) for i in range(3)]
    assert not all(d["passed"] for d in docs)  # a job whose gate failed did not end the sweep
    assert [d["env_kwargs"]["refuse_fraction"] for d in docs] == [0.5, 0.9, 0.95]


def test_a_single_calibrate_run_still_exits_1_on_a_failed_gate(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = _run(["calibrate", "synthesis.n_seeds=2", "synthesis.group_size=2", "+env_kwargs.refuse_fraction=0.5",
                 f"hydra.run.dir={tmp_path}/h"])
    assert code == 1
    assert json.loads((tmp_path / "h" / "calibration.json").read_text())["passed"] is False


# --- an out that already holds results ----------------------------------------------------------------------------

def test_analyze_refuses_an_out_with_results_and_overwrite_clears_old_labels(inputs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["analyze", f"trajectories={inputs}/traj.jsonl", "out=o", "analysis.k=1"]
    assert _run([*base, "analysis.n_runs=3", f"hydra.run.dir={tmp_path}/h1"]) in (0, None)
    assert len(list((tmp_path / "o" / "labels").iterdir())) == 3
    capsys.readouterr()
    before = (tmp_path / "o" / "selected_capabilities.json").read_text()
    assert _run([*base, "analysis.n_runs=2", f"hydra.run.dir={tmp_path}/h2"]) == 2
    assert "if_exists=overwrite" in capsys.readouterr().err
    assert (tmp_path / "o" / "selected_capabilities.json").read_text() == before
    assert _run([*base, "analysis.n_runs=2", "if_exists=overwrite", f"hydra.run.dir={tmp_path}/h3"]) in (0, None)
    assert sorted(p.name for p in (tmp_path / "o" / "labels").iterdir()) == ["run_01.json", "run_02.json"]


@pytest.mark.parametrize("command", ["bench", "eval"])
def test_a_rerun_into_one_out_dir_is_refused_and_overwrite_leaves_no_stale_trajectories(command, tmp_path,
                                                                                        monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    extra = ["n_boot=10"] if command == "bench" else []
    first = [command, "episodes=1", "out_dir=o", "policies.base={kind: oracle}", *extra,
             "+policies.x={kind: expert, knobs: {precondition: 1.0}}"]
    assert _run([*first, f"hydra.run.dir={tmp_path}/h1"]) in (0, None)
    stale = [p.name for p in (tmp_path / "o").glob("trajectories_*x.jsonl")]
    assert len(stale) == 1
    capsys.readouterr()
    second = [command, "episodes=1", "out_dir=o", "policies.base={kind: oracle}", *extra]
    assert _run([*second, f"hydra.run.dir={tmp_path}/h2"]) == 2
    assert "already holds results" in capsys.readouterr().err
    assert _run([*second, "if_exists=overwrite", f"hydra.run.dir={tmp_path}/h3"]) in (0, None)
    assert not (tmp_path / "o" / stale[0]).exists()
    assert len(list((tmp_path / "o").glob("trajectories_*.jsonl"))) == 1


def test_only_the_files_an_earlier_eval_wrote_count_as_results(tmp_path, monkeypatch, capsys):
    """A user's own trajectories_*.jsonl beside out_dir is neither a reason to refuse nor deleted by overwrite;
    an overwrite that fails half-way leaves the earlier results as they were."""
    import trace_train.evaluation.run as evaluation_run

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    mine = out / "trajectories_train.jsonl"
    mine.write_text("my own data\n")
    run = ["expert", "episodes=1", "out_dir=o", "policies.oracle={kind: oracle}", "~policies.imperfect-expert"]
    assert _run([*run, f"hydra.run.dir={tmp_path}/h1"]) in (0, None)  # not refused for the user's file
    earlier = (out / "eval.json").read_text()
    capsys.readouterr()

    def crash(*args, **kwargs):
        raise RuntimeError("killed half-way")

    monkeypatch.setattr(evaluation_run, "evaluate_policies", crash)
    assert _run([*run, "if_exists=overwrite", f"hydra.run.dir={tmp_path}/h2"]) == 1
    assert "killed half-way" in capsys.readouterr().err
    assert (out / "eval.json").read_text() == earlier and (out / "trajectories_oracle.jsonl").is_file()
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert _run([*run, "if_exists=overwrite", f"hydra.run.dir={tmp_path}/h3"]) in (0, None)
    assert mine.read_text() == "my own data\n"
    assert sorted(p.name for p in out.iterdir()) == ["eval.json", "trajectories_oracle.jsonl",
                                                     "trajectories_train.jsonl"]


# --- a manifest row replaced by one calibrated otherwise -------------------------------------------------------------

def test_replacing_a_manifest_row_calibrated_otherwise_is_logged(tmp_path, caplog):
    import gymnasium as gym

    from trace_envs.synthesis.emit import write_manifest_entry

    env_id = "trace/precondition_verification-warntest-v0"
    row = {"env_id": env_id, "family": "precondition_verification", "capability": "precondition_verification",
           "domain": "retail-sim"}
    try:
        with caplog.at_level(logging.WARNING, logger="trace_envs.synthesis.emit"):
            write_manifest_entry(tmp_path, {**row, "knobs": {"refuse_fraction": 0.5},
                                            "calibration": {"success_rate": 1.0, "n_seeds": 4, "group_size": 2}})
            write_manifest_entry(tmp_path, {**row, "knobs": {"refuse_fraction": 0.5},
                                            "calibration": {"success_rate": 1.0, "n_seeds": 4, "group_size": 2}})
            assert not caplog.records  # the same settings: nothing to say
            write_manifest_entry(tmp_path, {**row, "knobs": {"refuse_fraction": 0.9},
                                            "calibration": {"success_rate": 0.375, "n_seeds": 4, "group_size": 2}})
        [record] = caplog.records
        message = record.getMessage()
        assert env_id in message and "0.5" in message and "0.9" in message and "0.375" in message
        rows = json.loads((tmp_path / "manifest.json").read_text())["envs"]
        assert [r["knobs"] for r in rows] == [{"refuse_fraction": 0.9}]  # still replaced
    finally:
        gym.registry.pop(env_id, None)


# --- --help --------------------------------------------------------------------------------------------------------

def test_pipeline_help_shows_each_key_once_with_its_composed_default():
    from trace_train.confdoc import command_keys
    from trace_train.paths import CONF_DIR

    keys = command_keys(CONF_DIR, "pipeline")
    names = [k.key for k in keys]
    assert len(names) == len(set(names))
    got = {k.key: k.default for k in keys}
    assert got["grpo.iterations"] == "15"  # preset=quick, not pipeline.yaml's 5 nor grpo/default.yaml's 10
    assert got["moe.gate.scope"] == "episode"
    assert got["moe.train.method"] == "routing_targets"
    assert got["grpo.temperature"] == "${pipeline.policy.temperature}"
    assert got["preset"] == "quick"
    compose = {k.key: k.default for k in command_keys(CONF_DIR, "compose")}
    assert compose["moe.train.lr"] == "5.0e-3" and compose["moe.gate.scope"] == "token"


def test_train_help_says_which_model_keys_train_reads():
    from trace_train.confdoc import command_keys
    from trace_train.paths import CONF_DIR

    keys = {k.key: k for k in command_keys(CONF_DIR, "train")}
    assert "never builds a model" in keys["tiny_policy_dir"].comment


def test_temperature_zero_still_means_greedy_and_negative_is_refused():
    """The backends decode greedily at temperature 0 (as vLLM users set it); only a negative one is refused."""
    from trace_train.commands._validate import ConfigError, check_policy_spec
    from trace_train.paths import shipped_checkpoint
    from trace_train.policies import PolicySpec

    model = str(shipped_checkpoint())
    check_policy_spec(PolicySpec(kind="hf", name="p", model=model, temperature=0.0), "policy")
    with pytest.raises(ConfigError, match="policy.temperature must be a number >= 0"):
        check_policy_spec(PolicySpec(kind="hf", name="p", model=model, temperature=-1.0), "policy")
