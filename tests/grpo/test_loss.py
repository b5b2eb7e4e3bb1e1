import math

import pytest
import torch

from trace_train.grpo.loss import grpo_loss, k3_kl, sft_loss, token_entropy

torch.set_num_threads(1)


def _batch():
    new = torch.tensor([[0.0, -1.0, -0.5, -2.0], [0.0, -0.3, -0.2, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.5, -0.4, -2.0], [0.0, -0.1, -0.9, 0.0]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -2.0])
    return new, old, mask, adv


def _hand_token_terms(new, old, mask, adv, lo, hi):
    terms = {}
    for b in range(2):
        for t in range(4):
            if mask[b, t]:
                r = math.exp(float(new[b, t].detach() - old[b, t]))
                a = float(adv[b])
                terms[(b, t)] = -min(r * a, min(max(r, 1 - lo), 1 + hi) * a)
    return terms


def test_token_level_loss_matches_hand_computation():
    new, old, mask, adv = _batch()
    out = grpo_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.28, level="token")
    terms = _hand_token_terms(new, old, mask, adv, 0.2, 0.28)
    assert float(out.loss) == pytest.approx(sum(terms.values()) / 5, rel=1e-6)
    # clipped: (0,1) ratio e^0.5 > 1.28 with A>0 ; (1,1) ratio e^-0.2 = 0.82 >= 0.8 not clipped;
    # (1,2) ratio e^0.7 with A<0 -> not clipped (min picks the unclipped, larger penalty)
    assert out.metrics["clip_fraction"] == pytest.approx(1 / 5)
    out.loss.backward()
    assert new.grad[0, 0] == 0 and new.grad[1, 3] == 0  # masked tokens get no gradient
    assert new.grad[0, 1] == 0  # clipped token gets no gradient
    assert new.grad[0, 2] != 0


def test_token_seq_mean_and_sequence_levels_by_hand():
    new, old, mask, adv = _batch()
    terms = _hand_token_terms(new, old, mask, adv, 0.2, 0.2)
    seq0 = (terms[(0, 1)] + terms[(0, 2)] + terms[(0, 3)]) / 3
    seq1 = (terms[(1, 1)] + terms[(1, 2)]) / 2
    out = grpo_loss(new, old, adv, mask, eps_low=0.2, level="token_seq_mean")
    assert float(out.loss) == pytest.approx((seq0 + seq1) / 2, rel=1e-6)

    seq_terms = []
    for b, n in ((0, 3), (1, 2)):
        lr = float(((new[b].detach() - old[b]) * mask[b]).sum()) / n
        s, a = math.exp(lr), float(adv[b])
        seq_terms.append(-min(s * a, min(max(s, 0.8), 1.2) * a))
    out = grpo_loss(new, old, adv, mask, eps_low=0.2, level="sequence")
    assert float(out.loss) == pytest.approx(sum(seq_terms) / 2, rel=1e-6)


def test_kl_term_entropy_and_normalizer():
    new, old, mask, adv = _batch()
    ref = old - 0.1
    base = grpo_loss(new, old, adv, mask)
    with_kl = grpo_loss(new, old, adv, mask, ref_logprobs=ref, kl_beta=0.5)
    kl = k3_kl(new.detach(), ref)
    assert (kl >= 0).all()
    expected = float(base.loss) + 0.5 * float((kl * mask).sum() / mask.sum())
    assert float(with_kl.loss) == pytest.approx(expected, rel=1e-6)
    assert with_kl.metrics["ref_kl"] == pytest.approx(float((kl * mask).sum() / mask.sum()), rel=1e-6)
    logits = torch.randn(2, 4, 7, generator=torch.Generator().manual_seed(0))
    ent = grpo_loss(new, old, adv, mask, logits=logits).metrics["entropy"]
    p = torch.softmax(logits, -1)
    manual = -(p * p.log()).sum(-1)
    assert ent == pytest.approx(float((manual * mask).sum() / mask.sum()), rel=1e-5)
    assert torch.allclose(token_entropy(logits), manual, atol=1e-6)
    # micro-batching: two halves with the global normalizer sum to the whole
    halves = [grpo_loss(new[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], normalizer=5) for i in (0, 1)]
    assert float(halves[0].loss + halves[1].loss) == pytest.approx(float(base.loss), rel=1e-6)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(new, old, adv, mask, kl_beta=0.1)


def test_on_policy_gradient_is_policy_gradient_and_sft_loss():
    new, _, mask, adv = _batch()
    out = grpo_loss(new, new.detach(), adv, mask)
    out.loss.backward()
    # at ratio 1 the gradient of -A*ratio is -A / n_tokens per masked token
    expected = -(adv.reshape(-1, 1) * mask) / mask.sum()
    assert torch.allclose(new.grad, expected)
    assert out.metrics["clip_fraction"] == 0 and out.metrics["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    s = sft_loss(new.detach(), mask)
    assert float(s.loss) == pytest.approx(float(-(new.detach() * mask).sum() / 5))


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_a_huge_log_ratio_gives_a_finite_loss_and_gradient(level):
    """Sampler log-probs far from the trainer's (100 nats) overflowed exp(): inf loss or NaN gradients that
    would poison every LoRA weight in one step."""
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    for gap, adv in ((100.0, 1.0), (100.0, -1.0), (-100.0, 1.0)):
        new = torch.tensor([[0.0, -0.1, -0.2]], requires_grad=True)
        old = torch.tensor([[0.0, -0.1, -0.2 - gap]])
        out = grpo_loss(new, old, torch.tensor([adv]), mask, level=level)
        out.loss.backward()
        assert torch.isfinite(out.loss) and torch.isfinite(new.grad).all(), (gap, adv)
    # inside the clamp nothing changes: a 5-nat gap is computed exactly
    new = torch.tensor([[0.0, -0.1, -0.2]])
    old = torch.tensor([[0.0, -0.1, -5.2]])
    out = grpo_loss(new, old, torch.tensor([-1.0]), mask, level="token")
    assert out.loss.item() == pytest.approx((1.0 + math.exp(5.0)) / 2, rel=1e-6)
