"""The held-out gate examples are whole episodes: routing-target ``label: solvers`` makes one example per solving
slot of an episode (same tokens, same episode id), and a split per example held out sequences the gates trained
on. ``trace-rl compose``'s split (``_split``) is this one."""

from __future__ import annotations

import numpy as np
import pytest

from trace_moe.examples import GateExample, split_by_episode
from trace_train.commands.compose import _split


def _solvers_examples(n_episodes: int = 40, seed: int = 0) -> list[GateExample]:
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n_episodes):
        tokens = rng.integers(0, 300, 12).tolist()
        for slot in sorted(set(rng.integers(1, 4, size=int(rng.integers(1, 4))).tolist())):
            out.append(GateExample(tokens, [0] * 4 + [1] * 8, slot, f"trace/t-v0|{e}|a|0"))
    return out


@pytest.mark.parametrize("split", [split_by_episode, _split])
def test_no_held_out_episode_or_sequence_is_trained_on(split):
    examples = _solvers_examples()
    assert len(examples) > 50
    train, held = split(examples, 0.2, 3)
    assert held and len(train) + len(held) == len(examples)
    assert not {e.episode_id for e in train} & {e.episode_id for e in held}
    assert not {tuple(e.input_ids) for e in train} & {tuple(e.input_ids) for e in held}
    assert len(held) >= round(0.2 * len(examples))
    assert split(examples, 0.2, 3) == (train, held)  # the seed decides


def test_examples_without_an_episode_are_their_own_and_one_episode_is_never_all_held_out():
    loose = [GateExample([i, i + 1], [0, 1], 1) for i in range(10)]
    train, held = split_by_episode(loose, 0.3, 0)
    assert (len(train), len(held)) == (7, 3)
    one = [GateExample([1, 2], [0, 1], s, "same") for s in (1, 2, 3)]
    assert split_by_episode(one, 0.5, 0) == (one, [])
    assert split_by_episode(loose, 0.0, 0) == (loose, [])


def test_the_pipelines_split_holds_out_whole_episodes_and_is_the_plain_split_without_repeats():
    from trace_moe.examples import hold_out_episodes

    examples = _solvers_examples()
    order = np.random.default_rng(0).permutation(len(examples))
    train, held = hold_out_episodes(examples, order, len(examples) // 10)
    assert held and not {e.episode_id for e in train} & {e.episode_id for e in held}
    assert len(train) + len(held) == len(examples)
    loose = [GateExample([i, i + 1], [0, 1], 1) for i in range(20)]
    order = np.random.default_rng(0).permutation(20)
    assert hold_out_episodes(loose, order, 2) == ([loose[i] for i in order[2:]], [loose[i] for i in order[:2]])
