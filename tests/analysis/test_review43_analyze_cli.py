"""``trace-rl analyze`` at its edges: runs started together keep their own run folders and results; an ``out`` another
run is writing is refused; a misspelt top-level key is refused; errors found only at run time are one-line refusals
(exit 2), not tracebacks; a sweep's values are all checked before its first job; a sweep table lists this sweep's
jobs only."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time

from tests.analysis.test_analyze_command import polite_records
from tests.cli_runner import run_cli
from trace_train import cli
from trace_train.paths import REPO_ROOT
from trace_train.trajectory import write_trajectories

FAST = ("analysis.programmatic.noise_rate=0", "analysis.n_runs=2", "analysis.k=2")


def _traj(tmp_path, name="traj.jsonl", records=None):
    return write_trajectories(tmp_path / name, polite_records() if records is None else records)


def _multirun(*args: str) -> int:
    """``trace-rl <args>`` in-process (a ``-m`` sweep); its exit code."""
    argv = list(sys.argv)
    try:
        cli.main(list(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return 0


def test_two_runs_started_in_the_same_second_keep_two_run_folders(tmp_path):
    """With the default hydra.run.dir, two runs started together got one folder (to the second) and one lost its
    result; the folder's name now has microseconds."""
    a, b = _traj(tmp_path, "a.jsonl"), _traj(tmp_path, "b.jsonl", polite_records()[:12])
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    time.sleep(1 - time.time() % 1 + 0.05)  # both start at the beginning of one second
    procs = [subprocess.Popen([sys.executable, "-m", "trace_train.cli", "analyze", f"trajectories={t}", *FAST],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for t in (a, b)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    runs = sorted((tmp_path / "outputs" / "analyze").iterdir())
    assert len(runs) == 2
    sources = sorted(json.loads((r / "selected_capabilities.json").read_text())["run"]["trajectories"] for r in runs)
    assert sources == sorted([str(a), str(b)])


def test_an_out_another_run_is_writing_is_refused(tmp_path, capsys):
    from trace_envs.records import exclusive_output

    out = tmp_path / "out"
    with exclusive_output(out / "selected_capabilities.json"):  # as a run that has claimed out holds it
        code, _, err = run_cli("analyze", f"trajectories={_traj(tmp_path)}", f"out={out}", *FAST,
                               hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 2 and "is being written" in err
    assert not (out / "selected_capabilities.json").exists()


def test_a_misspelt_top_level_key_is_refused_with_the_closest_one(tmp_path, capsys):
    code, _, err = run_cli("analyze", f"trajectories={_traj(tmp_path)}", "+labeller=llm", f"out={tmp_path / 'o'}",
                           hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 2 and "labeller: unknown key (did you mean 'labeler'?)" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "h").exists()


def test_errors_found_at_run_time_are_one_line_refusals(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cases = [
        ([f"trajectories={empty}"], "holds no trajectories"),
        ([f"trajectories={_traj(tmp_path)}", "analysis.k=null"], "analysis.k must be an integer"),
        ([f"trajectories={_traj(tmp_path)}", "labeler=llm", "analysis.llm.base_url=http://127.0.0.1:9/v1",
          "analysis.llm.retries=0", f"analysis.llm.cache_dir={tmp_path / 'cache'}"], "127.0.0.1:9"),
    ]
    for i, (args, says) in enumerate(cases):
        code, _, err = run_cli("analyze", *args, f"out={tmp_path / f'o{i}'}", hydra_dir=tmp_path / f"h{i}",
                               capsys=capsys)
        assert code == 2, (args, err)
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_every_job_of_a_sweep_is_checked_before_the_first_runs(tmp_path):
    sweep = tmp_path / "sweep"
    code = _multirun("analyze", "-m", f"trajectories={_traj(tmp_path)}", *FAST, "analysis.delta=0.1,5",
                     f"hydra.sweep.dir={sweep}")
    assert code == 2
    assert not list(sweep.rglob("selected_capabilities.json"))  # job 0 did not run either


def test_a_sweep_table_lists_this_sweeps_jobs_only(tmp_path):
    traj, sweep = _traj(tmp_path), tmp_path / "sweep"
    assert _multirun("analyze", "-m", f"trajectories={traj}", *FAST, "analysis.delta=0.1,0.2,0.3",
                     f"hydra.sweep.dir={sweep}") == 0
    assert _multirun("analyze", "-m", f"trajectories={traj}", *FAST, "analysis.delta=0.5", "if_exists=overwrite",
                     f"hydra.sweep.dir={sweep}") == 0
    rows = list(csv.DictReader((sweep / "sweep_table.csv").open()))
    assert [(r["job"], float(r["delta"])) for r in rows] == [("0", 0.5)]


def test_a_user_config_keeps_its_own_top_level_keys_and_a_misspelt_added_key_is_still_refused(tmp_path, capsys):
    """With ``-cn`` a user's config may hold top-level keys of its own (here one it interpolates); only the keys the
    command line adds are checked against the command's."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "my_analyze.yaml").write_text("defaults:\n  - analyze\n  - _self_\nmy_out_root: "
                                          f"{tmp_path / 'runs'}\nout: ${{my_out_root}}/sel\n")
    base = ["--config-dir", str(conf), "--config-name", "my_analyze", f"trajectories={_traj(tmp_path)}"]
    code, _, err = run_cli("analyze", *base, hydra_dir=tmp_path / "h", capsys=capsys)
    assert code in (0, None), err
    assert (tmp_path / "runs" / "sel" / "selected_capabilities.json").is_file()
    code, _, err = run_cli("analyze", *base, "+labeller=llm", "if_exists=overwrite", hydra_dir=tmp_path / "h2",
                           capsys=capsys)
    assert code == 2 and "labeller: unknown key (did you mean 'labeler'?)" in err
