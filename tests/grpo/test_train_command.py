"""``trace-rl train`` end to end on a tiny policy with the real hf backend, and its fail-fast path.

The Hydra app runs in-process (``trace_train.cli.main`` with an argv) to avoid re-importing torch.
"""

import json

import pytest
import torch

from tests.cli_runner import run_cli

torch.set_num_threads(1)


def _cli(*overrides, cwd, capsys):
    """Run ``trace-rl train``; returns (exit code, stdout + stderr: errors go to stderr)."""
    code, out, err = run_cli("train", *overrides, hydra_dir=f"{cwd}/hydra", capsys=capsys)
    out = out + err
    return code, out


def test_train_command_runs_and_resumes(tmp_path, capsys):
    from tests.model.tiny_domain import ATOMIC, make_corpus
    from trace_train.model import build_model, build_tokenizer
    from trace_train.model.factory import save_policy

    tok = build_tokenizer(make_corpus(), ATOMIC, vocab_size=400, seed=0)
    save_policy(build_model("tiny", tok, seed=0), tok, tmp_path / "policy")
    common = [
        "env=trace/retail-sim-v0",
        "adapter=cap",
        f"model.name_or_path={tmp_path / 'policy'}",
        f"output_dir={tmp_path / 'run'}",
        "grpo.groups_per_iter=2",
        "grpo.group_size=2",
        "grpo.max_new_tokens=6",
        "rollout.max_turns=2",
        "grpo.checkpoint_every=1",
        "grpo.progress=false",
        "grpo.tensorboard=false",
    ]
    code, out = _cli(*common, "grpo.iterations=1", cwd=tmp_path, capsys=capsys)
    assert code == 0 and "adapter cap" in out, out
    assert (tmp_path / "run" / "adapters" / "cap" / "v0001" / "adapter_model.safetensors").exists()
    code, out = _cli(*common, "grpo.iterations=2", cwd=tmp_path, capsys=capsys)  # no resume: name taken
    assert code == 2 and "adapter name clash" in out
    code, out = _cli(*common, "grpo.iterations=2", "resume=true", cwd=tmp_path, capsys=capsys)
    assert code == 0, out
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    assert json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["iteration"] == 2
    # resuming another adapter's checkpoint, or from a damaged pointer: a one-line error before the model loads,
    # nothing written
    pointer = tmp_path / "run" / "checkpoints" / "latest.json"
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    other = [o if not o.startswith("adapter=") else "adapter=other" for o in common]
    code, out = _cli(*other, "grpo.iterations=3", "resume=true", cwd=tmp_path, capsys=capsys)
    assert code == 2 and "is for adapter 'cap', not 'other'" in out and "Traceback" not in out, out
    pointer.write_text("{not json")
    code, out = _cli(*common, "grpo.iterations=3", "resume=true", cwd=tmp_path, capsys=capsys)
    assert code == 2 and "latest.json is damaged" in out.replace("\n", "") and "Traceback" not in out, out
    pointer.write_text(json.dumps({"name": "iter_0009", "iteration": 9}))
    code, out = _cli(*common, "grpo.iterations=3", "resume=true", cwd=tmp_path, capsys=capsys)
    assert code == 2 and "points to missing checkpoint" in out.replace("\n", "") and "Traceback" not in out, out
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == metrics


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env=trace/no_such_capability-v0"], "unknown env id 'trace/no_such_capability-v0'"),
        (["env=trace/retail-sim-v0", "grpo.group_size=1"], "group_size must be >= 2"),
        (["env=trace/retail-sim-v0", "+grpo.lr_typo=1"], "grpo.lr_typo: unknown key"),
        # hints asked of an env that gives none: refused before the model loads (the model path does not exist)
        (["env=trace_envs.examples.calculator:my/calc-v0", "grpo.hint_fraction=0.5"], "does not support hints"),
    ],
)
def test_train_command_fails_fast(tmp_path, capsys, overrides, message):
    code, out = _cli(
        *overrides,
        "adapter=cap",
        "model.name_or_path=/nonexistent",
        f"output_dir={tmp_path}/run",
        cwd=tmp_path,
        capsys=capsys,
    )
    assert code == 2
    assert message in out.replace("\n", " ")
    assert not (tmp_path / "run").exists()
