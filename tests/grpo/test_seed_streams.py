"""No two seeded-GRPO streams share a SeedSequence state (trace_train.grpo.seeds' module docstring has the rule).

``SeedSequence`` pads entropy shorter than 4 words with zeros, so ``[s, it, 2]`` (the env mixture's old entropy) was
``[s, it, 2, 0]``: the env-seed stream of group 2 in the same iteration. The env and sampler seeds themselves are
pinned to the values the code gave before that fix (they feed every published figure)."""

from __future__ import annotations

import numpy as np
import pytest

from trace_train.grpo import seeds
from trace_train.grpo.seeds import env_seed, hinted_members, plan_iteration, sample_seed, shuffle_generator, update_seed
from trace_train.integrations.trl_rollout import member_seed

SeedSequence = np.random.SeedSequence  # the real one (the fixture below records through a stand-in)
RUN_SEEDS = (0, 1, 7, 2**31 - 1)
ITERATIONS = (0, 1, 2, 3, 17)


@pytest.fixture
def entropies(monkeypatch):
    """Records the entropy of every SeedSequence made while the test runs."""
    real = SeedSequence
    seen: list[tuple[int, ...]] = []

    def recording(entropy=None, *args, **kwargs):
        seen.append(tuple(int(e) for e in entropy))
        return real(entropy, *args, **kwargs)

    monkeypatch.setattr(np.random, "SeedSequence", recording)
    return seen


def _state(entropy) -> tuple[int, ...]:
    return tuple(int(w) for w in SeedSequence(list(entropy)).generate_state(4))


def _stream(entropies, fn, *args) -> tuple[int, ...]:
    """The state of the one stream ``fn(*args)`` draws from."""
    start = len(entropies)
    fn(*args)
    assert len(entropies) == start + 1, entropies[start:]
    return _state(entropies[-1])


def _mixture(monkeypatch, run_seed, iteration) -> tuple[int, ...]:
    """The state of the env-mixture stream: the one generator plan_iteration makes without hints."""
    real, made = np.random.default_rng, []

    def recording(seed=None):
        made.append(seed)
        return real(seed)

    with monkeypatch.context() as patch:
        patch.setattr(np.random, "default_rng", recording)
        plan_iteration(run_seed, iteration, 3, 2, {"a": 1.0, "b": 1.0})
    assert len(made) == 1 and isinstance(made[0], SeedSequence)
    return tuple(int(w) for w in made[0].generate_state(4))


@pytest.mark.parametrize("run_seed", RUN_SEEDS)
@pytest.mark.parametrize("iteration", ITERATIONS)
def test_the_mixture_stream_is_no_env_seed_stream(monkeypatch, entropies, run_seed, iteration):
    mixture = _mixture(monkeypatch, run_seed, iteration)
    env = {_stream(entropies, env_seed, run_seed, iteration, g) for g in range(64)}
    assert len(env) == 64 and mixture not in env


def test_no_two_streams_of_a_run_share_a_state(monkeypatch, entropies):
    """Every stream of seeds.py over a grid of run seeds, iterations, groups, members, ranks and epochs."""
    states: dict[tuple, tuple[int, ...]] = {}
    for s in RUN_SEEDS:
        for it in ITERATIONS:
            states["mix", s, it] = _mixture(monkeypatch, s, it)
            for g in range(16):
                states["env", s, it, g] = _stream(entropies, env_seed, s, it, g)
                states["hint", s, it, g] = _stream(entropies, hinted_members, s, it, g, 8, 0.5)
                for m in range(4):
                    states["sample", s, it, g, m] = _stream(entropies, sample_seed, s, it, g, m)
            for r in range(4):
                states["update", s, it, r] = _stream(entropies, update_seed, s, it, r)
                for e in range(4):
                    states["shuffle", s, it, e, r] = _stream(entropies, shuffle_generator, s, it, e, r)
    by_state: dict[tuple[int, ...], list[tuple]] = {}
    for name, state in states.items():
        by_state.setdefault(state, []).append(name)
    assert [names for names in by_state.values() if len(names) > 1] == []


def test_the_mixture_stream_is_no_trl_member_stream(monkeypatch, entropies):
    """The TRL adapter's member_seed streams fill every 4-word entropy; the mixture stream is longer."""
    for s in RUN_SEEDS[:2]:
        for it in ITERATIONS[:3]:
            mixture = _mixture(monkeypatch, s, it)
            members = {_stream(entropies, member_seed, s, it, e, m) for e in range(8) for m in range(8)}
            assert mixture not in members


def test_every_stream_is_at_least_four_words_and_ends_in_its_tag(entropies):
    """The rule of the module docstring, checked on the entropies the code builds."""
    plan_iteration(5, 2, 2, 2, {"a": 1.0, "b": 2.0}, 0.5)
    update_seed(5, 2, 1)
    shuffle_generator(5, 2, 0, 1)
    tags = {0: "env", 1: "sample", 2: "mix", 3: "shuffle", 4: "hint", 5: "update"}
    assert {(len(e), tags[e[-1]]) for e in entropies} == {
        (4, "env"), (4, "hint"), (4, "update"), (5, "sample"), (5, "shuffle"), (5, "mix")}
    assert (5, 2, 0, 0, seeds._TAG_MIX) in entropies


# Computed with trace_train/grpo/seeds.py as it was before the mixture fix (git HEAD b7dd8c8).
PINNED_ENV = {(0, 0, 0): 328062, (0, 0, 2): 308542, (7, 3, 1): 801321, (123, 45, 6): 903055, (2**31 - 1, 9, 63): 807954}
PINNED_SAMPLE = {(0, 0, 0, 0): 673228719, (0, 0, 2, 0): 431296032, (7, 3, 1, 5): 1984995010,
                 (123, 45, 6, 15): 1895645465}
PINNED_UPDATE = {(0, 0, 0): 1017935308, (7, 3, 1): 448795066}
PINNED_HINT = {(0, 0, 0, 8, 0.5): (0, 1, 2, 3), (7, 3, 2, 16, 0.25): (0, 7, 10, 14)}
PINNED_SHUFFLE = {(0, 0, 0, 0): [2, 9, 1, 7, 3, 6, 0, 4, 8, 5], (7, 3, 1, 2): [6, 9, 4, 7, 8, 3, 5, 0, 1, 2]}


def test_env_sampler_update_hint_and_shuffle_seeds_are_unchanged():
    assert {k: env_seed(*k) for k in PINNED_ENV} == PINNED_ENV
    assert {k: sample_seed(*k) for k in PINNED_SAMPLE} == PINNED_SAMPLE
    assert {k: update_seed(*k) for k in PINNED_UPDATE} == PINNED_UPDATE
    assert {k: hinted_members(*k) for k in PINNED_HINT} == PINNED_HINT
    assert {k: shuffle_generator(*k).permutation(10).tolist() for k in PINNED_SHUFFLE} == PINNED_SHUFFLE
    plan = plan_iteration(7, 3, 4, 3, {"a": 1.0, "b": 1.0}, 1 / 3)
    assert [g.env_seed for g in plan] == [env_seed(7, 3, g) for g in range(4)]
    assert [g.sample_seeds for g in plan] == [tuple(sample_seed(7, 3, g, m) for m in range(3)) for g in range(4)]


def test_the_mixture_draw_is_pinned():
    """The env choices the (fixed) mixture stream gives, so a later change to it is deliberate (the colliding
    ``[seed, it, 2]`` stream gave "cbcccaccbccc" here)."""
    plan = plan_iteration(0, 0, 12, 2, {"a": 1.0, "b": 1.0, "c": 2.0})
    assert "".join(g.env_id for g in plan) == "caccabccbbab"
