"""Gate training on synthetic capabilities, the loss terms, and the routing report."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from trace_moe import ComposedModel, GateConfig, GateExample, GateTrainConfig, routing_report, train_gates
from trace_moe.gate_training import label_loss, lm_loss, load_balancing_loss


def synthetic_examples(n_per_slot: int, seed: int, slots: int = 4, length: int = 12, prompt: int = 4) -> list[GateExample]:
    """Capability c is a token pattern: its tokens come from its own vocabulary band [20 + 10c, 28 + 10c)."""
    rng = np.random.default_rng(seed)
    out = []
    for slot in range(slots):
        for j in range(n_per_slot):
            ids = rng.integers(20 + 10 * slot, 28 + 10 * slot, size=length).tolist()
            out.append(GateExample(ids, [0] * prompt + [1] * (length - prompt), slot, f"{slot}-{seed}-{j}"))
    return out


def test_load_balancing_and_label_losses():
    mask = torch.ones(1, 8)
    uniform = torch.zeros(1, 8, 4)
    uniform[0, torch.arange(8), torch.arange(8) % 4] = 1e-3  # balanced argmax, ~uniform probs
    assert load_balancing_loss(uniform, mask).item() == pytest.approx(1.0, abs=1e-3)
    collapsed = torch.zeros(1, 8, 4)
    collapsed[..., 2] = 50.0
    assert load_balancing_loss(collapsed, mask).item() == pytest.approx(4.0, abs=1e-3)
    logits = torch.zeros(2, 3, 4)
    logits[0, :, 1] = 10.0
    half = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert label_loss(logits, half, torch.tensor([1, 3])).item() < 1e-3
    assert label_loss(logits, torch.ones(2, 3), torch.tensor([1, 3])).item() == pytest.approx(math.log(4) / 2, abs=1e-3)
    vocab_logits = torch.zeros(1, 3, 5)
    vocab_logits[0, 0, 2] = 100.0  # predicts token 2 at position 1 perfectly
    ids = torch.tensor([[0, 2, 4]])
    assert lm_loss(vocab_logits, ids, torch.tensor([[0.0, 1.0, 0.0]])).item() < 1e-6
    assert lm_loss(vocab_logits, ids, torch.tensor([[0.0, 0.0, 1.0]])).item() == pytest.approx(math.log(5))


def test_lm_loss_gradient_reaches_gates(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(init="zero"))
    with torch.no_grad():
        for gate in composed.gates:
            gate.proj.bias[2] = 3.0  # route every token to adapter 2, g = its prob
    ex = synthetic_examples(1, seed=0)[0]
    ids = torch.tensor([ex.input_ids])
    out = composed(input_ids=ids)
    lm_loss(out.logits, ids, torch.tensor([ex.loss_mask], dtype=torch.float)).backward()
    for gate in composed.gates:
        assert gate.proj.weight.grad is not None and gate.proj.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in composed.model.parameters())


@pytest.mark.parametrize("mode", ["end_to_end", "captured"])
def test_gate_training_beats_chance_on_held_out(tiny, mode, caplog):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths)  # base-slot bias init
    train, held_out = synthetic_examples(16, seed=1), synthetic_examples(6, seed=2)
    with caplog.at_level(logging.WARNING, logger="trace_moe.routing_report"):
        before = routing_report(composed, held_out)
    assert before.collapsed and before.load[0] == 1.0 and "collapse" in caplog.text
    assert before.token_accuracy == pytest.approx(0.25)  # everything on the base slot: chance
    cfg = GateTrainConfig(lr=3e-2, epochs=6, batch_size=8, grad_accum=1, label_coef=1.0, mode=mode, seed=3)
    metrics = train_gates(composed, train, cfg)
    assert metrics.trainable_params == 2 * (64 * 4 + 4)
    assert metrics.epochs[-1]["label"] < metrics.epochs[0]["label"]
    if mode == "end_to_end":
        assert all(np.isfinite(e["lm"]) for e in metrics.epochs)
    after = routing_report(composed, held_out)
    assert after.token_accuracy > 0.8, after
    assert after.episode_accuracy > 0.9
    assert not after.collapsed and max(after.load) < 0.5
    assert sum(after.load) == pytest.approx(1.0)
    assert 0.0 <= after.entropy <= math.log(composed.num_slots)
    assert after.num_tokens == len(held_out) * 8


def test_paper_preset_and_label_range(tiny):
    cfg = GateTrainConfig.paper()
    assert (cfg.lr, cfg.epochs, cfg.lb_coef, cfg.weight_decay) == (5e-4, 3, 0.001, 0.01)
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths)
    with pytest.raises(ValueError, match="out of range"):
        train_gates(composed, [GateExample([1, 2, 3], [0, 1, 1], 7)], cfg)
