"""`trace-rl compose` end to end on a tiny base, three adapters and trajectory-style JSONL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from trace_moe import ComposedModel
from trace_train.trajectory import write_jsonl_atomic

from .test_gate_training import synthetic_examples

REPO = Path(__file__).resolve().parents[2]


def test_compose_command_trains_and_saves(tiny, tmp_path):
    base_path, adapter_paths = tiny
    names = ["base", "cap0", "cap1", "cap2"]
    rows = [
        {"env_id": "x", "seed": i, "success": True, "token_ids": e.input_ids, "loss_mask": e.loss_mask,
         "episode_id": e.episode_id, "info": {"capability": names[e.label]}}
        for i, e in enumerate(synthetic_examples(10, seed=4))
    ]
    rows.append({"env_id": "x", "seed": 99, "success": False, "token_ids": [1, 2], "loss_mask": [0, 1],
                 "info": {"capability": "not-an-adapter"}})  # unsuccessful rows are dropped first
    data = write_jsonl_atomic(tmp_path / "data.jsonl", rows)
    out = tmp_path / "composed"
    cmd = [sys.executable, "-c", "from trace_train.cli import main; main()", "compose",
           f"base={base_path}", f"adapters=[{','.join(str(p) for p in adapter_paths)}]", f"data={data}",
           f"out={out}", "moe.train.lr=0.03", "moe.train.epochs=6", "moe.train.batch_size=8",
           "moe.train.grad_accum=1", "moe.train.label_coef=1.0", "held_out_frac=0.25",
           f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "compose_metrics.json").read_text())
    assert (metrics["num_train"], metrics["num_held_out"]) == (30, 10)
    assert metrics["routing"]["token_accuracy"] > 0.6
    assert metrics["train"]["trainable_params"] == 2 * (64 * 4 + 4)
    loaded = ComposedModel.load(out)
    assert loaded.slot_names == names
    assert not torch.equal(loaded.gates[0].proj.weight, torch.zeros_like(loaded.gates[0].proj.weight))


def test_compose_command_trains_on_every_token_and_saves_the_weighting(tiny, tmp_path):
    base_path, adapter_paths = tiny
    names = ["base", "cap0", "cap1", "cap2"]
    examples = synthetic_examples(6, seed=7)
    rows = [{"env_id": "x", "seed": i, "success": True, "token_ids": e.input_ids, "loss_mask": e.loss_mask,
             "episode_id": e.episode_id, "info": {"capability": names[e.label]}} for i, e in enumerate(examples)]
    data = write_jsonl_atomic(tmp_path / "data.jsonl", rows)
    out = tmp_path / "composed"
    cmd = [sys.executable, "-c", "from trace_train.cli import main; main()", "compose",
           f"base={base_path}", f"adapters=[{','.join(str(p) for p in adapter_paths)}]", f"data={data}",
           f"out={out}", "moe.train.labels=all_tokens", "moe.gate.weighting=selection", "moe.train.epochs=2",
           "held_out_frac=0.25", f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "compose_metrics.json").read_text())
    held = metrics["num_held_out"]
    assert metrics["routing"]["num_tokens"] == held * len(examples[0].input_ids)  # prompt tokens are labelled too
    assert ComposedModel.load(out).gate_config.weighting == "selection"


def test_compose_command_refuses_the_episode_scope_before_loading_a_model(tiny, tmp_path):
    base_path, adapter_paths = tiny
    data = write_jsonl_atomic(tmp_path / "data.jsonl", [{"env_id": "x", "seed": 0, "success": True, "token_ids": [1, 2],
                                                         "loss_mask": [0, 1], "info": {"capability": "cap0"}}])
    cmd = [sys.executable, "-c", "from trace_train.cli import main; main()", "compose",
           f"base={base_path}", f"adapters=[{adapter_paths[0]}]", f"data={data}",
           f"out={tmp_path / 'composed'}", "moe.gate.scope=episode", f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "trace-rl pipeline moe.gate.scope=episode" in proc.stderr + proc.stdout
    assert not (tmp_path / "composed").exists()
