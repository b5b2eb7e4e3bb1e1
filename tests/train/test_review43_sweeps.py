"""Every command's ``-m`` sweep (``trace_train.commands._app``): a job that fails does not stop the sweep, and the
command exits non-zero at the end naming each failed job; a sweep declared in ``hydra.sweeper.params`` gets the
per-job output check as one on the command line does."""

from __future__ import annotations

import json
import sys

from trace_train import cli

CALIBRATE = ("synthesis.n_seeds=2", "synthesis.group_size=2")


def _run(capsys, *args: str) -> tuple[int, str]:
    """``trace-rl <args>`` in-process; (exit code, stderr)."""
    argv, code = list(sys.argv), 0
    try:
        cli.main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return code, capsys.readouterr().err


def test_calibrate_sweep_whose_jobs_miss_the_gate_exits_non_zero_naming_them(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    code, err = _run(capsys, "calibrate", "-m", *CALIBRATE, "synthesis.gate.min_std=0.99",
                     "synthesis.policy.seed=0,1", f"hydra.sweep.dir={sweep}")
    assert code == 1
    assert "2 of 2 jobs of this sweep failed" in err and "#0 (" in err and "#1 (" in err
    for job in ("0", "1"):  # each job ran and recorded its result
        assert json.loads((sweep / job / "calibration.json").read_text())["passed"] is False


def test_a_failed_job_does_not_stop_the_sweep_of_any_command(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    code, err = _run(capsys, "rollout", "-m", "episodes=2", "batch_episodes=2", "split=train,nosuchsplit,test",
                     f"hydra.sweep.dir={sweep}")
    assert code == 2
    assert "1 of 3 jobs of this sweep failed: #1 (" in err and "split=nosuchsplit" in err
    assert (sweep / "0" / "trajectories.jsonl").is_file() and (sweep / "2" / "trajectories.jsonl").is_file()


def test_a_sweep_declared_in_the_sweeper_params_needs_per_job_outputs(tmp_path, capsys):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "calibrate_sweep.yaml").write_text(
        "defaults:\n  - calibrate\n  - _self_\nhydra:\n  sweeper:\n    params:\n      synthesis.policy.seed: 0,1\n")
    fixed = tmp_path / "fixed"
    code, err = _run(capsys, "calibrate", "-m", "-cd", str(conf), "-cn", "calibrate_sweep", *CALIBRATE, f"out={fixed}",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert code == 2 and "is the same for every job of this -m sweep" in err and "no job was run" in err
    assert not fixed.exists()


def test_a_glob_sweep_over_a_config_group_still_runs_every_job(tmp_path, capsys):
    """Hydra expands ``glob(...)`` only with its config loader: the up-front check leaves such a sweep to be checked
    job by job instead of crashing job #0."""
    sweep = tmp_path / "sweep"
    code, err = _run(capsys, "rollout", "-m", "policy=glob([oracle,expert])", "episodes=1", "batch_episodes=1",
                     f"hydra.sweep.dir={sweep}")
    assert code in (0, None), err
    assert (sweep / "0" / "trajectories.jsonl").is_file() and (sweep / "1" / "trajectories.jsonl").is_file()
