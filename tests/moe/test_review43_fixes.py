"""Review 43: tied gate logits choose one slot everywhere; fused-MoE LoRA is refused by name; the last, partial
gradient-accumulation window of gate training is the mean over its micro-batches."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import trace_moe.gate_training as gate_training
from trace_moe import ComposedModel, GateConfig, GateExample, GateTrainConfig, load_adapter, routing_report, train_gates
from trace_moe.gate_training import load_balancing_loss
from trace_moe.gated_lora import select_slots, topk_weights

IDS = [5, 17, 42, 99, 7, 3, 250, 11]


# -- 1. ties ---------------------------------------------------------------------------------------------------


def test_exact_ties_go_to_the_lowest_slot():
    weights = topk_weights(torch.zeros(2, 4), 1)
    assert weights[..., 0].tolist() == [0.25, 0.25] and (weights[..., 1:] == 0).all()
    second = topk_weights(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), 2)  # a base-bias init: every adapter slot ties
    assert (second[0, [0, 1]] > 0).all() and (second[0, 2:] == 0).all()
    assert select_slots(torch.tensor([[0.0, 2.0, 1.0, 2.0]]), 3).tolist() == [[1, 3, 2]]


def test_without_ties_the_selection_is_topk():
    logits = torch.randn(64, 5, generator=torch.Generator().manual_seed(0))
    for k in (1, 2, 5):
        assert torch.equal(select_slots(logits, k), logits.softmax(-1).topk(k, dim=-1).indices)
        top_p, top_i = logits.softmax(-1).topk(k, dim=-1)
        assert torch.equal(topk_weights(logits, k), torch.zeros(64, 5).scatter(-1, top_i, top_p))


def _forward_slots(composed: ComposedModel) -> list[torch.Tensor]:
    """Per block, the top-1 slot the forward pass ran on each token (the only slot with weight)."""
    return [gate.last_weights[0].argmax(-1) for gate in composed.gates]


def test_zero_init_runs_the_slot_the_report_and_the_lb_loss_count(tiny):
    """``init='zero'`` ties every logit: the model runs the base slot, and the report and the LB loss say so."""
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(init="zero"))
    ids = torch.tensor([IDS])
    with torch.no_grad():
        out = composed(input_ids=ids).logits
        ran = _forward_slots(composed)
        with composed.forcing(0):
            base_out = composed(input_ids=ids).logits
    assert all((slots == 0).all() for slots in ran)
    assert torch.equal(out, base_out)  # the base slot carries no adapter
    report = routing_report(composed, [GateExample(IDS, [0, 0] + [1] * 6, label=1)])
    assert report.load[0] == 1.0
    # the LB loss's f counts the slots the forward pass ran: its gradient is that of N * sum_i f_i P_i with them
    logits = torch.zeros(1, len(IDS), composed.num_slots, requires_grad=True)
    load_balancing_loss(logits, torch.ones(1, len(IDS))).backward()
    ref = torch.zeros_like(logits, requires_grad=True)
    f = F.one_hot(ran[0][None], composed.num_slots).float().mean((0, 1))
    (composed.num_slots * (f * ref.softmax(-1).mean((0, 1))).sum()).backward()
    torch.testing.assert_close(logits.grad, ref.grad)


def test_top2_base_bias_gates_take_slot_1_as_second_choice(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(top_k=2, base_bias=1.0))
    with torch.no_grad():
        composed(input_ids=torch.tensor([IDS]))
    for gate in composed.gates:
        chosen = (gate.last_weights[0] > 0).nonzero()[:, 1].view(len(IDS), 2)
        assert chosen.tolist() == [[0, 1]] * len(IDS)


# -- 2. fused MoE expert LoRA ----------------------------------------------------------------------------------


def test_adapter_on_fused_expert_parameters_is_refused_by_name(tiny, tmp_path):
    """peft >= 0.17 maps LoRA targets on a fused MoE base (Qwen3-MoE under transformers >= 5) onto parameters and
    writes a rank_pattern for them itself; the error must name the real cause, not the rank_pattern."""
    _, adapter_paths = tiny
    moe = shutil.copytree(adapter_paths[0], tmp_path / "moe_adapter")
    cfg = json.loads((moe / "adapter_config.json").read_text())
    cfg.update(target_parameters=["gate_up_proj", "down_proj"], rank_pattern={r".*\.gate_up_proj": 8},
               alpha_pattern={r".*\.gate_up_proj": 8})
    (moe / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"fused MoE expert parameters \(target_parameters=\['gate_up_proj'") as exc:
        load_adapter(moe)
    assert "rank_pattern" not in str(exc.value) and "q_proj" in str(exc.value)


# -- 4. gradient accumulation ----------------------------------------------------------------------------------


def _examples(n: int) -> list[GateExample]:
    rng = np.random.default_rng(1)
    return [GateExample(rng.integers(20, 200, size=10).tolist(), [0] * 3 + [1] * 7, label=1 + i % 3,
                        episode_id=f"e{i}") for i in range(n)]


def _step_grads(monkeypatch) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """Record, at every optimizer step, the gates' gradients and the parameters they were computed at."""
    seen = []
    real = gate_training._step

    def step(composed, opt, sched, cfg):
        params = list(composed.gate_parameters())
        seen.append(([p.grad.detach().clone() for p in params], [p.detach().clone() for p in params]))
        real(composed, opt, sched, cfg)

    monkeypatch.setattr(gate_training, "_step", step)
    return seen


def test_partial_last_window_is_the_mean_over_its_micro_batches(tiny, monkeypatch):
    """9 examples, micro-batch 1, grad_accum 8: the epoch's 2nd step has one micro-batch, and its gradient is that
    example's own loss gradient (was 1/8 of it)."""
    base_path, adapter_paths = tiny
    examples = _examples(9)
    settings = dict(lr=5e-3, epochs=1, batch_size=1, max_grad_norm=0.0, warmup_frac=0.0, seed=0)
    seen = _step_grads(monkeypatch)
    composed = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(base_bias=1.0))
    train_gates(composed, examples, GateTrainConfig(grad_accum=8, **settings))
    assert len(seen) == 2
    grads, params_before = seen[1]
    last = examples[int(np.random.default_rng(0).permutation(len(examples))[-1])]  # the epoch's 9th micro-batch
    # that example alone, from the same gates, one micro-batch per step
    with torch.no_grad():
        for p, value in zip(composed.gate_parameters(), params_before):
            p.copy_(value)
    train_gates(composed, [last], GateTrainConfig(grad_accum=1, **settings))
    own = seen[2][0]
    assert any(g.abs().sum() > 0 for g in own)
    for g, ref in zip(grads, own):
        torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-8)
