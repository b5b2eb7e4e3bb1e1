"""Every command refuses a bad count / fraction / env / model directory before any work: exit 2, one line
naming the key and what to set, no model loaded, and no folder left behind in the working directory."""

from __future__ import annotations

import json
import os
import sys

import pytest

from trace_train import cli


@pytest.fixture()
def inputs(tmp_path):
    """Files some commands need besides the bad key (outside the working directory)."""
    root = tmp_path / "inputs"
    root.mkdir()
    (root / "traj.jsonl").write_text("")
    (root / "selected.json").write_text(json.dumps({"selected": []}))
    (root / "run").mkdir()
    return root


# (command, overrides, the key the error must name); {in} is the inputs directory.
CASES = [
    ("rollout", ["episodes=0"], "episodes"),
    ("rollout", ["group_size=-1"], "group_size"),
    ("rollout", ["env=nosuch/env-v0"], "env"),
    ("rollout", ["policy=hf", "policy.model=./no_such_model"], "policy.model"),
    ("rollout", ["policy=hf", "policy.top_p=1.5"], "policy.top_p"),
    ("analyze", ["trajectories={in}/traj.jsonl", "analysis.k=0"], "analysis.k"),
    ("analyze", ["trajectories={in}/traj.jsonl", "analysis.rho=1.5"], "analysis.rho"),
    ("analyze", ["trajectories={in}/traj.jsonl", "analysis.k=11"], "analysis.k"),
    ("analyze", ["trajectories={in}/traj.jsonl", "analysis.llm.batch_size=0"], "analysis.llm.batch_size"),
    ("analyze", ["trajectories={in}/missing.jsonl"], "trajectories"),
    ("synthesize", ["selected={in}/selected.json", "synthesis.n_seeds=0"], "synthesis.n_seeds"),
    ("synthesize", ["selected={in}/selected.json", "synthesis.gate.success_min=2"], "synthesis.gate.success_min"),
    ("synthesize", ["selected={in}/missing.json"], "selected"),
    ("calibrate", ["synthesis.group_size=0"], "synthesis.group_size"),
    ("calibrate", ["synthesis.hint_fraction=-0.1"], "synthesis.hint_fraction"),
    ("calibrate", ["env=nosuch/env-v0"], "env"),
    ("train", ["env=trace/retail-sim-v0", "adapter=a", "grpo.iterations=0"], "grpo.iterations"),
    ("train", ["env=trace/retail-sim-v0", "adapter=a", "grpo.micro_batch_size=-2"], "grpo.micro_batch_size"),
    ("train", ["env=trace/retail-sim-v0", "adapter=a", "grpo.hint_fraction=2"], "grpo.hint_fraction"),
    ("train", ["env=nosuch/env-v0", "adapter=a"], "nosuch/env-v0"),
    ("train", ["env=trace/retail-sim-v0", "adapter=a", "model.name_or_path=./no_such_model"], "model.name_or_path"),
    ("compose", ["adapters=[x]", "data=y", "moe.train.epochs=0"], "moe.train.epochs"),
    ("compose", ["adapters=[x]", "data=y", "moe.gate.top_k=0"], "moe.gate.top_k"),
    ("compose", ["adapters=[x]", "data=y", "moe.train.warmup_frac=1.5"], "moe.train.warmup_frac"),
    ("eval", ["episodes=0"], "episodes"),
    ("eval", ["batch_episodes=0"], "batch_episodes"),
    ("eval", ["policies.base.model=./no_such_model"], "policies.base.model"),
    ("eval", ["env=nosuch/env-v0"], "env"),
    ("expert", ["trials=0"], "trials"),
    ("expert", ["+policies.oracle.max_new_tokens=0"], "policies.oracle.max_new_tokens"),
    ("bench", ["n_boot=0"], "n_boot"),
    ("bench", ["episodes=-3"], "episodes"),
    ("bench", ["policies.base.model=./no_such_model"], "policies.base.model"),
    ("pipeline", ["pipeline.rollouts.episodes=0"], "pipeline.rollouts.episodes"),
    ("pipeline", ["grpo.group_size=1"], "grpo.group_size"),
    ("pipeline", ["moe.gate.top_k=0"], "moe.gate.top_k"),
    ("pipeline", ["pipeline.policy.top_p=3"], "pipeline.policy.top_p"),
    ("pipeline", ["bootstrap.steps=0"], "bootstrap.steps"),
    ("pipeline", ["grpo.lora.r=0"], "grpo.lora.r"),
    ("pipeline", ["pipeline.target_env=nosuch/env-v0"], "pipeline.target_env"),
    ("pipeline", ["pipeline.base_model=./no_such_model"], "pipeline.base_model"),
    ("report", ["run_dir={in}/run", "viewer.max_total=0"], "viewer.max_total"),
    ("bootstrap", ["bootstrap.steps=0"], "bootstrap.steps"),
    ("bootstrap", ["bootstrap.min_lr_ratio=1.5"], "bootstrap.min_lr_ratio"),
]


@pytest.mark.parametrize(("command", "overrides", "key"), CASES, ids=[f"{c}-{o[-1]}" for c, o, _ in CASES])
def test_bad_key_refused_before_any_work(command, overrides, key, inputs, tmp_path, monkeypatch, capsys,
                                         no_model_load):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = list(sys.argv)
    code = 0
    try:
        cli.main([command, *[o.replace("{in}", str(inputs)) for o in overrides]])
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"trace-rl {command}: "), err
    assert key in lines[0], err
    assert "set " in lines[0] or "choose" in lines[0] or "register" in lines[0], err
    assert os.listdir(work) == [], f"left behind: {os.listdir(work)}"
