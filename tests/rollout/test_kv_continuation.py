"""Cross-turn KV caches: continuing a row's cache gives the episode a fresh prefill would give."""

import pytest
import torch

import trace_train.rollout.hf_generate as hg
from tests.rollout.fake_tool_env import fake_factory
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.hf_generate import _length_buckets, generate_turn
from trace_train.rollout.sampling import make_generator

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12)


def _requests(n_groups=2, group_size=3, turns=3):
    return [EpisodeRequest("fake/tool-v0", seed=g, sample_seed=100 * g + m, env_kwargs={"turns": turns}, group=g)
            for g in range(n_groups) for m in range(group_size)]


def test_cached_rollout_equals_uncached_and_encodes_fewer_tokens(model, tokenizer, monkeypatch):
    encoded = []
    real = model.forward

    def counting(*args, **kwargs):
        encoded.append(int(kwargs["input_ids"].numel()))
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    backend = HFRolloutBackend(model, tokenizer, env_factory=fake_factory, keep_cache=False)
    plain = backend.rollout(_requests(), SAMPLING)
    n_plain, encoded[:] = sum(encoded), []
    cached = HFRolloutBackend(model, tokenizer, env_factory=fake_factory).rollout(_requests(), SAMPLING)
    assert [r.token_ids for r in cached] == [r.token_ids for r in plain]
    for a, b in zip(cached, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert sum(encoded) < n_plain  # earlier turns are not encoded again


def test_generate_turn_hands_back_a_cache_that_continues_exactly(model, tokenizer):
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 10, 11, 12, 13]]
    sampling = SamplingParams(greedy=True, max_new_tokens=4)
    first = generate_turn(model, prompts, [4, 4], sampling, [make_generator(0)] * 2, set(), 0, caches=[None, None])
    for prompt, out in zip(prompts, first):
        assert out.cache is not None and out.cache.length == len(prompt) + len(out.ids) - 1
    follow = [p + o.ids + [20, 21, 22][: k + 1] for k, (p, o) in enumerate(zip(prompts, first))]
    gens = [make_generator(1), make_generator(2)]
    again = generate_turn(model, follow, [3, 3], SamplingParams(max_new_tokens=3), gens, set(), 0,
                          caches=[o.cache for o in first])
    fresh = generate_turn(model, follow, [3, 3], SamplingParams(max_new_tokens=3), [make_generator(1),
                          make_generator(2)], set(), 0)
    assert [o.ids for o in again] == [o.ids for o in fresh]
    assert [o.logprobs for o in again] == [pytest.approx(o.logprobs, abs=1e-4) for o in fresh]
    with pytest.raises(ValueError, match="cache covers"):
        generate_turn(model, [prompts[0][:2]], [2], sampling, [make_generator(0)], set(), 0, caches=[first[0].cache])


def test_rows_without_a_cache_in_a_length_bucket_of_their_own(model):
    """``caches`` may mix ``RowCache`` and ``None`` (a row encoded whole); a long cache-less row lands in a bucket
    with no cache at all, which is prefilled fresh and continues like the rest."""
    sampling = SamplingParams(greedy=True, max_new_tokens=3)
    first = generate_turn(model, [[5, 6, 7, 8]], [3], sampling, [make_generator(0)], set(), 0, caches=[None])
    prompts = [[5, 6, 7, 8, *first[0].ids, 9], list(range(10, 340))]
    assert len(hg._length_buckets([len(prompts[0]) - first[0].cache.length, len(prompts[1])])) == 2
    cached = generate_turn(model, prompts, [3, 3], sampling, [make_generator(1)] * 2, set(), 0,
                           caches=[first[0].cache, None])
    fresh = generate_turn(model, prompts, [3, 3], sampling, [make_generator(1)] * 2, set(), 0)
    assert [o.ids for o in cached] == [o.ids for o in fresh]


def test_identical_prompts_are_encoded_once(model, monkeypatch):
    widths = []
    real = hg._prefill

    def spy(model_, prompts, *args, **kwargs):
        widths.append(len(prompts))
        return real(model_, prompts, *args, **kwargs)

    monkeypatch.setattr(hg, "_prefill", spy)
    gens = [make_generator(s) for s in range(4)]
    outs = generate_turn(model, [[5, 6, 7]] * 3 + [[5, 8]], [5] * 4, SAMPLING, gens, set(), 0, caches=[None] * 4)
    assert widths == [2] and len({tuple(o.ids) for o in outs[:3]}) > 1  # one prefill row per distinct prompt
    alone = generate_turn(model, [[5, 6, 7]], [5], SAMPLING, [make_generator(1)], set(), 0)
    assert outs[1].ids == alone[0].ids


@pytest.mark.parametrize("lengths,cost", [([10, 11, 12, 100], 20), ([5] * 6, 256), ([1, 200], 0), ([3], 5)])
def test_length_buckets_are_optimal_partitions(lengths, cost):
    import itertools

    buckets = _length_buckets(lengths, cost)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))

    def total(parts):
        return sum(cost + len(b) * max(lengths[i] for i in b) for b in parts)

    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = min(total([order[a:b] for a, b in zip((0, *cuts), (*cuts, len(order)))])
               for k in range(len(order)) for cuts in itertools.combinations(range(1, len(order)), k))
    assert total(buckets) == best
    if cost == 0:
        assert len(buckets) == len(set(lengths))


def test_last_timings_split_env_and_generation(model, tokenizer):
    backend = HFRolloutBackend(model, tokenizer, env_factory=fake_factory)
    backend.rollout(_requests(1, 2), SAMPLING)
    t = backend.last_timings
    assert t["rollout_s"] > 0 and t["generate_s"] > 0 and t["env_s"] >= 0
    assert t["generate_s"] + t["env_s"] == pytest.approx(t["rollout_s"])
    assert torch.get_num_threads() >= 1
