"""grpo.packing: packed and bucketed micro-batches give the padded path's log-probs and GRPO gradients.

Real episodes of ``trace/precondition_verification-v0`` played by the shipped base, a LoRA with
non-zero weights on it, float32 on CPU.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import trace_envs  # noqa: F401  (registers the envs)
from trace_train.grpo.config import GRPOConfig
from trace_train.grpo.lora import LoraSettings, attach_adapter, trainable_parameters
from trace_train.grpo.packing import VARLEN_ATTENTION, PackingUnsupported, packed_attention
from trace_train.grpo.update import Sample, micro_batch_logprobs, optimize, sequence_logprobs
from trace_train.model.factory import load_policy
from trace_train.paths import shipped_checkpoint
from trace_train.rollout.base import SamplingParams, group_requests
from trace_train.rollout.hf import HFRolloutBackend

torch.set_num_threads(1)
ENV_ID = "trace/precondition_verification-v0"
# float32 log-probs reach ~10 in magnitude; padded and packed attention sum in other orders, a few ulps of 1e-6 each
# (session 28's box measured 1.14e-5 where session 27's stayed under 1e-5); a misplaced mask or position moves them
# by 0.1 or more
ATOL = 3e-5


@pytest.fixture(scope="module")
def base_and_samples():
    model, tok = load_policy(shipped_checkpoint())
    backend = HFRolloutBackend(model, tok, threads=1, render_tools=False)
    records = backend.rollout(group_requests(ENV_ID, {}, [0, 1, 2], 2), SamplingParams(max_new_tokens=32))
    samples = [Sample(r.token_ids, r.loss_mask, advantage=0.3 * (i - 2.5)) for i, r in enumerate(records)]
    lengths = [len(s.token_ids) for s in samples]
    assert len(set(lengths)) > 1 and all(s.n_tokens > 0 for s in samples)  # padding really happens
    return model, samples


def _adapted(model):
    """A fresh LoRA copy of the base with non-zero B (the adapter changes every log-prob)."""
    lora = attach_adapter(copy.deepcopy(model), "pack", LoraSettings(r=4, alpha=8, init_seed=3))
    g = torch.Generator().manual_seed(7)
    for name, p in trainable_parameters(lora):
        if "lora_B" in name:
            with torch.no_grad():
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return lora


@pytest.mark.parametrize("packing", ["bucketed", "packed"])
def test_token_logprobs_equal_the_padded_path(base_and_samples, packing):
    model, samples = base_and_samples
    lora = _adapted(model).eval()
    with torch.no_grad():
        ref, ref_ent, mask = micro_batch_logprobs(lora, samples[:4], 1.0, "none", with_entropy=True)
        got, got_ent, got_mask = micro_batch_logprobs(lora, samples[:4], 1.0, packing, with_entropy=True)
    assert torch.equal(mask, got_mask)
    sel = mask > 0
    assert float(ref[sel].abs().mean()) > 0.1  # real, non-trivial log-probs
    assert float((ref - got)[sel].abs().max()) < ATOL
    assert float((ref_ent - got_ent)[sel].abs().max()) < ATOL
    assert float(got[~sel].abs().max()) == 0.0
    # sequence_logprobs (old / reference log-probs) agree on every position the loss reads
    padded = sequence_logprobs(lora, samples, 3, 1.0, packing="none")
    other = sequence_logprobs(lora, samples, 3, 1.0, packing=packing)
    for s, a, b in zip(samples, padded, other):
        m = torch.tensor(s.loss_mask[1:]) > 0
        assert a.shape == b.shape == (len(s.token_ids),)
        assert float((a[1:][m] - b[1:][m]).abs().max()) < ATOL


@pytest.mark.parametrize("packing", ["bucketed", "packed"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_grpo_gradient_equals_the_padded_path(base_and_samples, packing, level):
    model, samples = base_and_samples
    grads, metrics = {}, {}
    for mode in ("none", packing):
        lora = _adapted(model)
        params = [p for _, p in trainable_parameters(lora)]
        cfg = GRPOConfig(micro_batch_size=4, packing=mode, loss_level=level, kl_beta=0.1, grad_clip=0.0, eps=0.1)
        lora.eval()
        base_lps = sequence_logprobs(lora, samples, 4, 1.0, packing="none")
        g = torch.Generator().manual_seed(1)
        old = [lp + 0.3 * torch.randn(lp.shape, generator=g) for lp in base_lps]  # ratios off 1: clipping runs
        ref = [lp - 0.2 for lp in base_lps]
        before = [p.detach().clone() for p in params]
        # SGD with lr 1 and no clipping: the parameter change IS minus the gradient of the summed loss
        metrics[mode] = optimize(lora, torch.optim.SGD(params, lr=1.0), params, samples, cfg, 0, old, ref)
        grads[mode] = [b - p.detach() for b, p in zip(before, params)]
    ref_grads, got = grads["none"], grads[packing]
    assert max(float(g.abs().max()) for g in ref_grads) > 1e-3  # the gradient is not trivially zero
    for a, b in zip(ref_grads, got):
        assert torch.allclose(a, b, rtol=1e-4, atol=ATOL), float((a - b).abs().max())
    if level == "token":
        assert 0 < metrics["none"]["clip_fraction"] < 1
    for key in ("loss", "clip_fraction", "approx_kl", "ref_kl", "entropy"):
        assert metrics[packing][key] == pytest.approx(metrics["none"][key], rel=1e-4, abs=ATOL), key


def test_packed_sequences_do_not_see_each_other(base_and_samples):
    model, samples = base_and_samples
    lora = _adapted(model).eval()
    first = samples[0].token_ids
    changed = dataclasses.replace(samples[0], token_ids=[first[0]] + [5] * (len(first) - 1))
    with torch.no_grad():
        a, _, mask = micro_batch_logprobs(lora, samples[:3], 1.0, "packed")
        b, _, _ = micro_batch_logprobs(lora, [changed, *samples[1:3]], 1.0, "packed")
    assert float((a[0] - b[0]).abs().max()) > 1e-3  # the changed sequence itself moved
    assert torch.equal(a[1:], b[1:])  # the others, packed after it in the same row, did not


def test_packed_attention_restores_the_model_and_refuses_what_it_cannot_pack(base_and_samples):
    model, _ = base_and_samples
    before = model.config._attn_implementation
    with pytest.raises(ZeroDivisionError):
        with packed_attention(model, [3, 4]):
            assert model.config._attn_implementation == VARLEN_ATTENTION
            raise ZeroDivisionError
    assert model.config._attn_implementation == before
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable()
    with pytest.raises(PackingUnsupported, match="gradient checkpointing"):
        with packed_attention(checkpointed, [3, 4]):
            pass

    class Bypass(torch.nn.Module):
        """A causal LM whose forward never calls the transformers attention interface."""

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.embed = torch.nn.Embedding(config.vocab_size, 8)
            self.out = torch.nn.Linear(8, config.vocab_size)

        def forward(self, input_ids, **_):
            return type("Out", (), {"logits": self.out(self.embed(input_ids))})()

    bypass = Bypass(copy.deepcopy(model.config))
    sample = Sample([1, 5, 6, 7], [0, 1, 1, 1])
    with pytest.raises(PackingUnsupported, match="0 packed attention calls"):
        micro_batch_logprobs(bypass, [sample, sample], 1.0, "packed")
    assert micro_batch_logprobs(bypass, [sample, sample], 1.0, "bucketed")[0].shape == (2, 4)
    with pytest.raises(ValueError, match="packing must be one of"):
        GRPOConfig(packing="tight").validate()
    with pytest.raises(ValueError, match="unknown packing"):
        micro_batch_logprobs(model, [sample], 1.0, "tight")
