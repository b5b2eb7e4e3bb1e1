"""What a changed setting redoes: ``Pipeline.run``'s real hash chain, stage runner and ``pipeline.json``, with the
stage bodies replaced by recorders (the bodies are tested elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

import trace_train.pipeline.run as pipeline_run
from trace_envs.synthesis import SynthesisConfig
from trace_train.analysis.config import AnalysisConfig
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.grpo import GRPOConfig
from trace_train.pipeline.config import MoEConfig, PipelineConfig
from trace_train.pipeline.stages import composition_fingerprint


def _run(run_dir: Path, monkeypatch, **pipeline_kw) -> dict[str, dict]:
    monkeypatch.setattr(pipeline_run, "resolve_base_model", lambda *args: {"model": "tiny", "source": "given"})

    def fake_grpo_run(cfg, gcfg, model, env, adapter, out, iterations, mode="grpo", env_kwargs=None):
        versions = [{"iteration": i, "rollouts": 8 * i, "dir": str(out / f"v{i:04d}")}
                    for i in range(1, iterations + 1)]
        return {"adapter": adapter, "adapter_dir": versions[-1]["dir"], "versions": versions,
                "rollouts": 8 * iterations, "lr": gcfg.lr}

    monkeypatch.setattr(pipeline_run, "grpo_run", fake_grpo_run)
    cfg = PipelineConfig(run_dir=str(run_dir), **pipeline_kw)
    cfg.report.routing_sample = 0
    cfg.compose.enabled = False
    # checkpoint_every divides the budget: with both target rows the 1x row is the 4x run's checkpoint at 2
    p = pipeline_run.Pipeline(cfg, BootstrapConfig(), AnalysisConfig(), SynthesisConfig(),
                              GRPOConfig(iterations=2, checkpoint_every=2),
                              Path("."), moe_cfg=MoEConfig())
    p._rollouts = lambda model, out: {}
    p._analysis = lambda out: {"selected": ["precondition_verification"]}
    p._synthesis = lambda caps, model, out: {"envs": {"precondition_verification": "env"}}
    p._register_emitted = lambda: None
    p._eval = lambda *args: {"evaluated": True}
    p._report = lambda out: {}
    p.run()
    return json.loads((run_dir / "pipeline.json").read_text())["stages"]


def test_the_1x_target_row_taken_from_the_4x_run_is_redone_when_the_4x_run_is(tmp_path, monkeypatch):
    """With both target rows alike, the 1x row is a checkpoint of the 4x run: an override that retrains the 4x run
    must redo the 1x row too (it would point into the retrained run while recording the old one)."""
    both = {"baselines": ["grpo_target", "grpo_target_4x"]}
    stages = _run(tmp_path / "run", monkeypatch, **both)
    assert stages["baselines/grpo_target"]["last_action"] == "ran"
    stages = _run(tmp_path / "run", monkeypatch, **both)
    assert {stages[k]["last_action"] for k in ("baselines/grpo_target", "baselines/grpo_target_4x")} == {"skipped"}
    stages = _run(tmp_path / "run", monkeypatch, **both, baseline_grpo={"grpo_target_4x": {"lr": 3e-5}})
    assert stages["baselines/grpo_target_4x"]["last_action"] == "ran"
    assert stages["baselines/grpo_target"]["last_action"] == "ran"


def test_a_capability_override_redoes_its_adapter_and_what_follows(tmp_path, monkeypatch):
    """``pipeline.capability_grpo`` enters the training hash: the adapter trains again with it (so does what reads
    the adapters), the same override again skips, and a run without overrides keeps its hashes."""
    first = _run(tmp_path / "run", monkeypatch)
    assert _run(tmp_path / "run", monkeypatch, capability_grpo={})["train/precondition_verification"][
        "last_action"] == "skipped"
    over = {"precondition_verification": {"lr": 3e-3}}
    stages = _run(tmp_path / "run", monkeypatch, capability_grpo=over)
    assert {stages[k]["last_action"] for k in ("train/precondition_verification", "eval")} == {"ran"}
    assert stages["train/precondition_verification"]["hash"] != first["train/precondition_verification"]["hash"]
    assert stages["train/precondition_verification"]["outputs"]["lr"] == 3e-3
    assert first["train/precondition_verification"]["outputs"]["lr"] == GRPOConfig().lr
    stages = _run(tmp_path / "run", monkeypatch, capability_grpo=over)
    assert stages["train/precondition_verification"]["last_action"] == "skipped"


def test_the_composition_fingerprint_sees_the_gates_not_the_paths(tmp_path):
    """The compose stage's outputs carry it, so eval (whose hash reads those outputs) redoes a changed composition
    even when its directory and counts stay the same."""
    composed = tmp_path / "composed"
    composed.mkdir()
    (composed / "compose.json").write_text('{"gate_config": {"top_k": 1}}')
    (composed / "gates.safetensors").write_bytes(b"\x00" * 64)
    first = composition_fingerprint(composed)
    assert composition_fingerprint(composed) == first
    (composed / "gates.safetensors").write_bytes(b"\x00" * 63 + b"\x01")
    second = composition_fingerprint(composed)
    (composed / "compose.json").write_text('{"gate_config": {"top_k": 2}}')
    assert len({first, second, composition_fingerprint(composed)}) == 3


def test_compositions_whose_gates_learn_from_hinted_rollouts_carry_the_gate_data_version(tmp_path, monkeypatch):
    """Gate examples are taken under the unhinted prompt since session 41; a token-level composition over hinted
    GRPO runs names that in its hash, so a run directory composed before is redone (and nothing else)."""
    from dataclasses import replace

    from trace_train.pipeline.stages import gate_data_part

    token, hinted, plain = MoEConfig(), GRPOConfig(hint_fraction=0.5, group_size=8), GRPOConfig()
    assert token.gate.scope == "token" and gate_data_part(token, hinted)
    assert gate_data_part(replace(token, train=replace(token.train, method="grpo_target")), hinted)
    assert gate_data_part(token, plain) == ()  # no hinted rollouts: the examples never changed
    assert gate_data_part(replace(token, gate=replace(token.gate, scope="episode")), hinted) == ()
    assert gate_data_part(replace(token, train=replace(token.train, method="routing_targets")), hinted) == ()

    monkeypatch.setattr(pipeline_run, "compose_adapters", lambda *args, **kw: {"composed_dir": "c"})
    original = pipeline_run.Pipeline.__init__

    def with_compose(self, cfg, *args, **kw):
        cfg.compose.enabled = True
        original(self, cfg, *args, **kw)

    monkeypatch.setattr(pipeline_run.Pipeline, "__init__", with_compose)
    stages = _run(tmp_path / "run", monkeypatch)
    assert stages["compose"]["last_action"] == "ran"
    assert _run(tmp_path / "run", monkeypatch)["compose"]["last_action"] == "skipped"
    monkeypatch.setattr(pipeline_run, "gate_data_part", lambda moe, grpo: ("another gate data version",))
    stages = _run(tmp_path / "run", monkeypatch)
    assert stages["compose"]["last_action"] == "ran"
    assert stages["train/precondition_verification"]["last_action"] == "skipped"


def test_a_replication_row_of_a_composed_model_sees_its_gates(tmp_path):
    """An extra seed's composed rows are evaluated from the same paths whatever their gates; their eval stages
    hash the composition, so a recomposed seed is evaluated again even when seed 0's composition did not change."""
    from trace_train.pipeline.stages import composition_part
    from trace_train.policies import PolicySpec

    composed = tmp_path / "composed"
    composed.mkdir()
    (composed / "compose.json").write_text('{"gate_config": {"top_k": 1}}')
    (composed / "gates.safetensors").write_bytes(b"\x00" * 64)
    for fill, kind in enumerate(("composed", "task_router"), start=1):
        spec = PolicySpec(kind=kind, name="t", model="m", adapter=str(composed))
        before = composition_part(spec)
        assert before == (composition_fingerprint(composed),)
        (composed / "gates.safetensors").write_bytes(bytes([fill]) * 64)
        assert composition_part(spec) != before
    assert composition_part(PolicySpec(kind="hf", name="a", model="m", adapter=str(tmp_path))) == ()
