"""moe.train.mode=captured: the captured gate inputs carry no label. Two examples with the same tokens and
different labels get the same inputs in every block (no token-reading gate can tell them apart, so none may learn
to): they are routed by the gates, as at inference; the paper's capture, forced to each label, gave block 1 the
label's adapter already applied."""

from __future__ import annotations

import torch

from trace_moe import ComposedModel, GateConfig
from trace_moe.examples import GateExample
from trace_moe.gate_training import GateTrainConfig, capture_gate_inputs


def test_identical_sequences_with_different_labels_get_identical_gate_inputs(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths[:2], GateConfig(top_k=1, init="zero"))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # gates that route tokens to the adapters, not all to the base slot
        for gate in composed.gates:
            gate.proj.weight.copy_(torch.randn(gate.proj.weight.shape, generator=gen))
    examples = []
    for i in range(3):
        tokens = torch.randint(0, 300, (16,), generator=gen).tolist()
        mask = [0] * 6 + [1] * 10
        examples += [GateExample(tokens, mask, 1, f"e{i}a"), GateExample(tokens, mask, 2, f"e{i}b")]
    inputs, labels = capture_gate_inputs(composed, examples, GateTrainConfig(mode="captured", batch_size=1))
    assert composed.num_layers >= 2
    assert labels.tolist() == [lab for e in examples for lab in [e.label] * 10]
    for layer, x in enumerate(inputs):
        per_example = x.reshape(len(examples), 10, -1)
        for i in range(0, len(examples), 2):
            assert torch.equal(per_example[i], per_example[i + 1]), f"block {layer}, pair {i // 2}"
