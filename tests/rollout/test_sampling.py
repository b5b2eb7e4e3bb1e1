import torch

from trace_train.rollout import SamplingParams
from trace_train.rollout.sampling import make_generator, sample_tokens


def test_rows_depend_only_on_their_own_generator():
    logits = torch.randn(5, 50, generator=make_generator(0))
    full, lp_full = sample_tokens(logits, SamplingParams(), [make_generator(s) for s in range(5)])
    alone, lp_alone = sample_tokens(logits[3:4], SamplingParams(), [make_generator(3)])
    assert full[3] == alone[0] and torch.allclose(lp_full[3], lp_alone[0])


def test_sampling_matches_the_distribution_and_logprobs():
    logits = torch.tensor([[0.0, 1.0, 2.0, -9.0]])
    gen = make_generator(1)
    draws = torch.stack([sample_tokens(logits, SamplingParams(temperature=1.0), [gen])[0] for _ in range(4000)])
    freq = torch.bincount(draws.flatten(), minlength=4).float() / 4000
    assert torch.allclose(freq, torch.softmax(logits[0], -1), atol=0.03)
    tok, lp = sample_tokens(logits, SamplingParams(temperature=0.5), [gen])
    assert torch.isclose(lp[0], torch.log_softmax(logits[0] / 0.5, -1)[tok[0]])


def test_top_p_and_greedy():
    logits = torch.tensor([[3.0, 2.9, -5.0, -5.0]])
    gen = make_generator(2)
    draws = {int(sample_tokens(logits, SamplingParams(top_p=0.5), [gen])[0]) for _ in range(200)}
    assert draws == {0, 1} or draws == {0}
    assert 2 not in draws and 3 not in draws
    tok, lp = sample_tokens(logits, SamplingParams(greedy=True), [])
    assert int(tok[0]) == 0 and torch.isclose(lp[0], torch.log_softmax(logits[0], -1)[0])
