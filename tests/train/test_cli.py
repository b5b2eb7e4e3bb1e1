import subprocess
import sys

from trace_train.cli import COMMANDS


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "trace_train.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_help_lists_every_command():
    out = _run("--help")
    assert out.returncode == 0
    for name in COMMANDS:
        assert name in out.stdout


def test_unknown_command_fails_clearly():
    out = _run("frobnicate")
    assert out.returncode == 2 and "unknown command" in out.stdout


def test_expert_command_writes_eval_json(tmp_path):
    out = _run("expert", "episodes=40", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads((tmp_path / "eval.json").read_text())
    policies = result["policies"]
    assert policies["oracle"]["overall"]["rate"] == 1.0
    assert policies["imperfect-expert"]["overall"]["rate"] < 0.8
    assert (tmp_path / "trajectories_oracle.jsonl").exists()


def test_rollout_command_rejects_unknown_env(tmp_path):
    out = _run("rollout", "env=trace/nope-v0", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert out.returncode != 0 and "unknown env id" in (out.stderr + out.stdout)
