"""Files the trainers and the report publish: plain-write permissions, bytes that do not depend on the
process, and readers that refuse a record whose ``success`` is not a bool."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trace_train.report.loaders import load_jsonl

SAVE = """
import sys, torch
sys.path.insert(0, {tests!r})
from grpo_toy import tiny_model
from trace_train.grpo.lora import LoraSettings, attach_adapter, save_adapter
from trace_train.grpo.checkpoint import save_checkpoint
model = attach_adapter(tiny_model(0), "cap", LoraSettings(r=2, alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
save_adapter(model, "cap", {out!r} + "/adapter")
save_checkpoint({out!r}, 1, model, "cap", torch.optim.AdamW([p for p in model.parameters() if p.requires_grad]))
"""


def _save(out: Path, hash_seed: str, umask: int) -> None:
    tests = str(Path(__file__).resolve().parents[1] / "grpo")
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    code = f"import os; os.umask({umask}); " + SAVE.format(tests=tests, out=str(out))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tests, timeout=300)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_adapters_and_checkpoints_get_plain_write_modes_and_the_same_bytes_in_every_process(tmp_path):
    _save(tmp_path / "a", "1", 0o022)
    _save(tmp_path / "b", "2", 0o027)
    for sub in ("adapter", "checkpoints/iter_0001", "checkpoints/iter_0001/adapter"):
        assert _mode(tmp_path / "a" / sub) == 0o755 and _mode(tmp_path / "b" / sub) == 0o750, sub
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        a, b = tmp_path / "a" / "adapter" / name, tmp_path / "b" / "adapter" / name
        assert _mode(a) == 0o644 and _mode(b) == 0o640, name
        assert a.read_bytes() == b.read_bytes(), name  # peft's set of target modules is saved sorted
    config = json.loads((tmp_path / "a" / "adapter" / "adapter_config.json").read_text())
    assert config["target_modules"] == sorted(config["target_modules"])


def _record(**kw):
    row = {"env_id": "x", "seed": 1, "messages": [], "reward": 0.0, "success": False, "termination": "user_stop"}
    row.update(kw)
    return row


def test_the_report_refuses_a_trajectory_whose_success_is_a_string(tmp_path):
    path = tmp_path / "rollouts" / "trajectories.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(_record()) + "\n" + json.dumps(_record(success="false")) + "\n")
    loaded = load_jsonl(tmp_path, "rollouts/trajectories.jsonl", trajectories=True)
    assert loaded.error and ":2" in loaded.error and "success" in loaded.error
    assert load_jsonl(tmp_path, "rollouts/trajectories.jsonl").error is None  # a plain JSONL file is not checked


def test_gate_examples_refuse_a_string_success(tmp_path):
    from trace_moe.examples import read_examples

    path = tmp_path / "gate.jsonl"
    path.write_text(json.dumps(_record(success="false", token_ids=[1, 2], loss_mask=[0, 1])) + "\n")
    with pytest.raises(ValueError, match="gate.jsonl:1: field 'success' must be a bool"):
        read_examples(path, ["base", "cap"])
