"""Per-position gate labels (``moe.train.labels``) and whole-slot gating (``moe.gate.weighting=selection``)."""

from __future__ import annotations

import pytest
import torch

from trace_moe import ComposedModel, GateConfig, GateExample, GateTrainConfig, routing_report, train_gates
from trace_moe.examples import collate
from trace_moe.gate_training import label_loss, position_label_loss
from trace_moe.gated_lora import topk_weights
from trace_moe.token_labels import label_examples, likelihood_token_labels, next_token_logprobs

from .test_gate_training import synthetic_examples


def test_position_labels_follow_the_assistant_mask_or_the_token_labels():
    ex = GateExample([5, 6, 7, 8], [0, 0, 1, 1], 2)
    assert ex.position_labels() == [-1, -1, 2, 2]
    assert GateExample([5, 6], [0, 0], 1).position_labels() == [1, 1]  # no assistant token: every token
    assert GateExample([5, 6, 7], [0, 1, 1], 2, token_labels=[-1, 0, 2]).position_labels() == [-1, 0, 2]
    with pytest.raises(ValueError, match="differ in length"):
        GateExample([5, 6, 7], [0, 1, 1], 2, token_labels=[0, 2])
    with pytest.raises(ValueError, match="-1"):
        GateExample([5, 6], [0, 1], 1, token_labels=[-2, 1])


def test_collate_pads_position_labels_and_the_assistant_loss_is_unchanged():
    examples = synthetic_examples(2, seed=0, length=10, prompt=3)[:3] + [GateExample([1, 2, 3], [0, 0, 0], 2)]
    batch = collate(examples)
    assert batch.position_labels.shape == batch.input_ids.shape
    assert batch.position_labels[3].tolist() == [2, 2, 2] + [-1] * 7  # padding is never labelled
    logits = torch.randn(*batch.input_ids.shape, 4)
    gate_mask = batch.loss_mask.clone()
    gate_mask[3, :3] = 1.0  # the old rule: a row without assistant tokens trains on all its real tokens
    assert torch.equal(position_label_loss(logits, batch.position_labels),
                       label_loss(logits, gate_mask, batch.labels))


@pytest.fixture
def composed(tiny):
    base_path, adapter_paths = tiny
    return ComposedModel.from_pretrained(base_path, adapter_paths)


def test_likelihood_labels_mark_where_the_own_adapter_beats_the_base(composed):
    examples = synthetic_examples(2, seed=5, length=14, prompt=4)
    examples[0] = GateExample(examples[0].input_ids[:9], examples[0].loss_mask[:9], examples[0].label)  # ragged batch
    margin = 0.05
    labelled = likelihood_token_labels(composed, examples, margin, batch_size=3)
    assert [e.label for e in labelled] == [e.label for e in examples]
    adapter_positions = 0
    for original, example in zip(examples, labelled):
        ids = torch.tensor([original.input_ids])
        with torch.no_grad(), composed.forcing(0):
            base = composed(input_ids=ids).logits[0, :-1].log_softmax(-1)
        with torch.no_grad(), composed.forcing(original.label):
            own = composed(input_ids=ids).logits[0, :-1].log_softmax(-1)
        gain = (own - base).gather(-1, ids[0, 1:, None]).squeeze(-1)
        for t, label in enumerate(example.token_labels):
            if t == len(original.input_ids) - 1 or not original.loss_mask[t + 1]:
                assert label == -1, (t, original.loss_mask)
            elif original.label == 0:
                assert label == 0
            else:
                assert label == (original.label if gain[t] >= margin else 0), (t, float(gain[t]))
                adapter_positions += label > 0
    assert adapter_positions > 0  # the random adapters do beat the base somewhere
    huge = likelihood_token_labels(composed, examples, 1e6)
    assert all(label <= 0 for e in huge for label in e.token_labels)
    with pytest.raises(ValueError, match="margin"):
        likelihood_token_labels(composed, examples, -1.0)


def test_next_token_logprobs_do_not_depend_on_the_batch(composed):
    examples = synthetic_examples(1, seed=6, length=11)
    examples[1] = GateExample(examples[1].input_ids[:6], examples[1].loss_mask[:6], examples[1].label)
    batched = next_token_logprobs(composed, examples, 2, batch_size=4)
    single = [next_token_logprobs(composed, [e], 2, batch_size=1)[0] for e in examples]
    assert [x.shape[0] for x in batched] == [len(e.input_ids) - 1 for e in examples]
    for a, b in zip(batched, single):
        assert torch.allclose(a, b, atol=1e-5)


def test_all_token_labels_train_and_report_every_token(composed):
    train = label_examples(composed, synthetic_examples(8, seed=1), "all_tokens", 0.0)
    held = label_examples(composed, synthetic_examples(3, seed=2), "all_tokens", 0.0)
    assert all(e.token_labels == [e.label] * len(e.input_ids) for e in train)
    assert label_examples(composed, train[:2], "assistant", 0.0) == train[:2]
    with pytest.raises(ValueError, match="gate labels"):
        label_examples(composed, train, "episode", 0.0)
    train_gates(composed, train, GateTrainConfig(lr=3e-2, epochs=8, batch_size=8, grad_accum=1, label_coef=1.0,
                                                 mode="captured", seed=0))
    report = routing_report(composed, held)
    assert report.num_tokens == sum(len(e.input_ids) for e in held)  # the prompt tokens count too
    assert report.token_accuracy > 0.7


def test_selection_weighting_runs_the_chosen_adapter_whole(tiny):
    logits = torch.tensor([[0.2, 1.0, 0.4]], requires_grad=True)
    weights = topk_weights(logits, 1, straight_through=True)
    assert weights.tolist() == [[0.0, 1.0, 0.0]]
    (weights * torch.tensor([[0.0, 3.0, 0.0]])).sum().backward()
    expected = logits.detach().requires_grad_()
    (topk_weights(expected, 1) * torch.tensor([[0.0, 3.0, 0.0]])).sum().backward()  # the probability's gradient
    assert torch.allclose(logits.grad, expected.grad) and logits.grad.abs().sum() > 0

    base_path, adapter_paths = tiny
    ids = torch.tensor([[21, 22, 23, 24, 25]])
    selected = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(init="zero", weighting="selection"))
    weighted = ComposedModel.from_pretrained(base_path, adapter_paths, GateConfig(init="zero"))
    for model in (selected, weighted):
        with torch.no_grad():
            for gate in model.gates:
                gate.proj.bias[2] = 0.5  # adapter 2 wins every token, with probability ~0.36
    with torch.no_grad():
        with selected.forcing(2):
            forced = selected(input_ids=ids).logits
        assert torch.allclose(selected(input_ids=ids).logits, forced, atol=1e-5)
        assert not torch.allclose(weighted(input_ids=ids).logits, forced, atol=1e-3)
    with pytest.raises(ValueError, match="weighting"):
        GateConfig(weighting="soft")
    with pytest.raises(ValueError, match="labels"):
        GateTrainConfig(labels="tokens")
    with pytest.raises(ValueError, match="likelihood_margin"):
        GateTrainConfig(likelihood_margin=-0.5)
