"""``trace-rl analyze``: a threshold sweep via subprocess (sweep table) and the llm labeler in-process."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

from hydra import compose, initialize_config_dir

from tests.analysis.llm_server import FakeLLMServer, aliases_in, capabilities_in, prompt_of
from trace_train.analysis.run import run_analysis
from trace_train.paths import CONF_DIR, REPO_ROOT
from trace_train.trajectory import TrajectoryRecord, read_trajectories, write_trajectories


def polite_records() -> list[TrajectoryRecord]:
    """10 failed (5 impolite) and 10 passed (2 impolite): politeness Cov = 0.5, Δ = 0.5 − 0.2 = 0.3."""
    out = []
    for i in range(20):
        failed = i < 10
        rude = i < 5 or 10 <= i < 12
        out.append(TrajectoryRecord(
            env_id="unit/generic-v0", seed=i, success=not failed, reward=0.0 if failed else 1.0,
            termination="user_stop",
            messages=[{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "Done." if rude else "Done, thank you!"}]))
    return out


def test_multirun_sweep_writes_table(tmp_path):
    traj = write_trajectories(tmp_path / "traj.jsonl", polite_records())
    sweep = tmp_path / "sweep"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HYDRA_FULL_ERROR="1")
    cmd = [sys.executable, "-m", "trace_train.cli", "analyze", "-m", f"trajectories={traj}",
           "analysis.programmatic.noise_rate=0", "analysis.n_runs=3", "analysis.k=3",
           "analysis.delta=0.1,0.4", "analysis.rho=0.05,0.6", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader((sweep / "sweep_table.csv").open()))
    assert len(rows) == 4
    got = {(float(r["delta"]), float(r["rho"])): r["selected"] for r in rows}
    assert got == {(0.1, 0.05): "politeness", (0.1, 0.6): "", (0.4, 0.05): "", (0.4, 0.6): ""}
    assert all("analysis.delta=" in r["overrides"] for r in rows)
    html = (sweep / "sweep_table.html").read_text()
    assert html.startswith("<!doctype html>") and html.count("<tr>") == 5
    job = json.loads((sweep / "0" / "selected_capabilities.json").read_text())
    assert job["totals"] == {"episodes": 20, "failed": 10, "passed": 10}
    assert len(list((sweep / "0" / "labels").glob("run_*.json"))) == 3


def test_llm_labeler_end_to_end_through_config(tmp_path):
    records = polite_records()
    traj = write_trajectories(tmp_path / "traj.jsonl", records)

    def model(body, n):
        prompt = prompt_of(body)
        if "Capability discovery" in prompt:
            return json.dumps({"candidates": [
                {"name": "courtesy", "description": "Thanks the user."},
                {"name": "format_compliance", "description": "Follows the format."}]})
        rude = {a for a, _ in aliases_in(prompt)
                if "thank you" not in prompt.split(f"### {a} ")[1].split("###")[0]}
        caps = capabilities_in(prompt)
        return json.dumps({"labels": {a: {c: ("LACKING" if a in rude else "PRESENT") if c == "courtesy"
                                          else "PRESENT" for c in caps} for a, _ in aliases_in(prompt)}})

    with FakeLLMServer(model) as srv, initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("analyze", overrides=[
            f"trajectories={traj}", "labeler=llm", f"out={tmp_path / 'out'}",
            f"analysis.llm.base_url={srv.base_url}", f"analysis.llm.cache_dir={tmp_path / 'cache'}",
            "analysis.llm.batch_size=8", "analysis.n_runs=2", "analysis.k=2"])
        out = run_analysis(read_trajectories(cfg.trajectories), cfg.analysis, cfg.labeler, cfg.out)
        n_requests = len(srv.requests)
        run_analysis(read_trajectories(cfg.trajectories), cfg.analysis, cfg.labeler, tmp_path / "out2")
    assert n_requests == 1 + 2 * 3 and len(srv.requests) == n_requests   # rerun served by the cache
    assert [c.name for c in out.result.selected] == ["courtesy"]
    sel = json.loads((tmp_path / "out" / "selected_capabilities.json").read_text())
    assert sel["selected"][0]["mean_delta"] == 0.3 or abs(sel["selected"][0]["mean_delta"] - 0.3) < 1e-9
    cands = json.loads((tmp_path / "out" / "candidate_capabilities.json").read_text())["candidates"]
    assert [c["name"] for c in cands] == ["courtesy", "format_compliance"]


def test_a_malformed_trajectories_file_is_a_one_line_refusal(tmp_path, capsys):
    from tests.cli_runner import run_cli

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"seed": 1, "reward": 0.0}) + "\n")
    out = tmp_path / "analysis"
    code, _, err = run_cli("analyze", f"trajectories={bad}", f"out={out}", hydra_dir=tmp_path / "hydra",
                           capsys=capsys)
    assert code == 2 and "bad.jsonl:1" in err and "required field" in err and "Traceback" not in err
    assert not out.exists()
