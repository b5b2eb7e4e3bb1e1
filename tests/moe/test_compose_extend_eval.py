"""`compose extend=... eval_episodes=N`: held-out pass rate of the saved and the extended composition on the
same env seeds, written into compose_metrics.json and printed."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import run_cli
from trace_moe import ComposedModel, GateConfig, GateTrainConfig, train_gates
from trace_train.paths import shipped_checkpoint
from trace_train.trajectory import read_trajectories, write_jsonl_atomic

from .moe_helpers import make_adapter
from .test_compose_extend import _rollout_rows
from .test_gate_training import synthetic_examples


@pytest.fixture(scope="module")
def shipped_setup(tmp_path_factory):
    """Three random adapters on the shipped base (it has a tokenizer, so compositions can play) and a saved
    two-adapter composition."""
    root = tmp_path_factory.mktemp("extend_eval")
    base = shipped_checkpoint()
    adapters = [make_adapter(base, root / f"cap{i}", seed=200 + i, std=0.05) for i in range(3)]
    composed = ComposedModel.from_pretrained(base, adapters[:2], GateConfig(base_bias=1.0))
    examples = [e for e in synthetic_examples(3, seed=2) if e.label < 3]
    train_gates(composed, examples, GateTrainConfig(lr=0.03, epochs=1, batch_size=8, grad_accum=1))
    composed.save(root / "old")
    return root, base, adapters


def test_extend_reports_pass_rate_before_and_after_on_the_same_seeds(shipped_setup, tmp_path, capsys):
    root, _, adapters = shipped_setup
    data = write_jsonl_atomic(tmp_path / "data.jsonl", _rollout_rows(synthetic_examples(3, seed=5)))
    out = tmp_path / "new"
    code, stdout, stderr = run_cli(
        "compose", f"extend={root / 'old'}", f"adapters=[{adapters[2]}]", f"data={data}", f"out={out}",
        "held_out_frac=0.25", "env_labels={trace/retail-sim-v0: base}", "moe.train.epochs=1",
        "moe.train.batch_size=8", "moe.train.grad_accum=1", "eval_episodes=3", "eval_split=test",
        hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, stderr
    metrics = json.loads((out / "compose_metrics.json").read_text())
    ev = metrics["eval"]
    assert ev["env"] == "trace/retail-sim-v0" and ev["split"] == "test" and ev["episodes"] == 3
    for name in ("before", "after"):
        assert ev[name]["overall"]["n"] == 3
        assert 0.0 <= ev[name]["overall"]["rate"] <= 1.0
    assert ev["delta"] == pytest.approx(ev["after"]["overall"]["rate"] - ev["before"]["overall"]["rate"])
    seeds = {name: sorted(r.seed for r in read_trajectories(out / "eval" / f"trajectories_{name}.jsonl"))
             for name in ("before", "after")}
    assert seeds["before"] == seeds["after"] and len(seeds["after"]) == 3  # the same env seeds
    assert "held-out pass rate" in stdout and "before" in stdout and "after" in stdout


def test_eval_is_off_by_default_and_checked_before_any_model(shipped_setup, tmp_path, capsys, monkeypatch):
    root, _, adapters = shipped_setup
    data = write_jsonl_atomic(tmp_path / "data.jsonl", _rollout_rows(synthetic_examples(1, seed=5)))
    monkeypatch.chdir(tmp_path)
    for bad, key in (("eval_episodes=-1", "eval_episodes"), ("eval_env=nosuch/env-v0", "eval_env")):
        code, _, stderr = run_cli("compose", f"extend={root / 'old'}", f"adapters=[{adapters[2]}]", f"data={data}",
                                  "eval_episodes=2", bad, hydra_dir="outputs/compose/now", capsys=capsys)
        assert code == 2 and key in stderr, stderr
        assert not (tmp_path / "outputs").exists()
    out = tmp_path / "plain"
    code, _, stderr = run_cli("compose", f"extend={root / 'old'}", f"adapters=[{adapters[2]}]", f"data={data}",
                              f"out={out}", "held_out_frac=0", "env_labels={trace/retail-sim-v0: base}",
                              "moe.train.epochs=1", "moe.train.batch_size=8", "moe.train.grad_accum=1",
                              hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, stderr
    assert "eval" not in json.loads((out / "compose_metrics.json").read_text())
    assert not (out / "eval").exists()
