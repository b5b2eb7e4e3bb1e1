"""Saving a composition over an earlier one: a save interrupted before ``compose.json`` leaves a folder ``load``
refuses, not new gates beside the old metadata."""

from __future__ import annotations

import pytest
import torch

import trace_envs.records
from trace_moe import ComposedModel, GateConfig
from trace_moe.composed import COMPOSE_JSON


def _composition(tiny, seed: int) -> ComposedModel:
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(top_k=1, init="zero"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for gate in composed.gates:
            gate.proj.weight.copy_(torch.randn(gate.proj.weight.shape, generator=gen))
    return composed


def test_a_save_interrupted_before_compose_json_is_refused_by_load(tiny, tmp_path, monkeypatch):
    out = _composition(tiny, seed=1).save(tmp_path / "composed")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(trace_envs.records, "write_json_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        _composition(tiny, seed=2).save(out)
    monkeypatch.undo()
    assert not (out / COMPOSE_JSON).exists()
    with pytest.raises(ValueError, match="no compose.json"):
        ComposedModel.load(out)
