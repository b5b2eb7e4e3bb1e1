"""Deterministic seeds for seeded-group GRPO.

Every number is a pure function of ``(run seed, iteration, group index[, member index])`` through
``numpy.random.SeedSequence``, so any rollout can be replayed and a resumed run sees exactly the
seeds an uninterrupted run would have seen. All G members of a group share one env seed (identical
initial state) and get distinct sampler seeds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from trace_envs.hints import hinted_count
from trace_envs.splits import SPLITS

# Domain tags keep the streams for env seeds, sampler seeds, env choice and shuffling independent.
_TAG_ENV, _TAG_SAMPLE, _TAG_MIX, _TAG_SHUFFLE, _TAG_HINT, _TAG_UPDATE = 0, 1, 2, 3, 4, 5
_MAX_SEED = 2**31 - 1


def _draw(*entropy: int) -> int:
    state = np.random.SeedSequence([int(e) for e in entropy]).generate_state(1, dtype=np.uint32)[0]
    return int(state) & _MAX_SEED


def env_seed(run_seed: int, iteration: int, group: int) -> int:
    """The env seed shared by every member of group ``group`` in iteration ``iteration``.

    Always inside the shared ``train`` split, so training never sees a held-out test seed.
    """
    train = SPLITS["train"]
    return train.start + _draw(run_seed, iteration, group, _TAG_ENV) % len(train)


def sample_seed(run_seed: int, iteration: int, group: int, member: int) -> int:
    """The sampler seed of one group member (distinct across members, stable across reruns)."""
    return _draw(run_seed, iteration, group, member, _TAG_SAMPLE)


def shuffle_generator(run_seed: int, iteration: int, epoch: int, rank: int = 0) -> np.random.Generator:
    """RNG for mini-batch shuffling in one PPO epoch of one iteration (per rank)."""
    return np.random.default_rng(np.random.SeedSequence([run_seed, iteration, epoch, rank, _TAG_SHUFFLE]))


def update_seed(run_seed: int, iteration: int, rank: int = 0) -> int:
    """The torch seed of one iteration's update on one rank (LoRA dropout masks), whatever ran before it."""
    return _draw(run_seed, iteration, rank, _TAG_UPDATE)


def hinted_members(run_seed: int, iteration: int, group: int, group_size: int, fraction: float) -> tuple[int, ...]:
    """The members of one group that get the env's hint: ``fraction × G`` of them (a whole number,
    ``trace_envs.hints.hinted_count``), drawn from the seed (sorted). A zero fraction gives no member and
    draws nothing."""
    count = hinted_count(fraction, group_size, "hint fraction")
    if count == 0:
        return ()
    rng = np.random.default_rng(np.random.SeedSequence([run_seed, iteration, group, _TAG_HINT]))
    return tuple(sorted(int(m) for m in rng.permutation(group_size)[:count]))


@dataclass(frozen=True)
class GroupSeeds:
    """The seeds of one group: which env, its env seed and one sampler seed per member."""

    iteration: int
    group: int
    env_id: str
    env_seed: int
    sample_seeds: tuple[int, ...]
    hinted: tuple[int, ...] = ()  # member indices that play with the env's hint

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_iteration(
    run_seed: int,
    iteration: int,
    groups: int,
    group_size: int,
    env_weights: Mapping[str, float],
    hint_fraction: float = 0.0,
) -> list[GroupSeeds]:
    """Seeds for every group of one iteration; the env of each group is drawn from the weighted mixture.

    With a single env id the draw is trivial. The mixture draw uses its own seeded stream, so adding a
    group never changes the env seeds of the others.
    """
    if groups < 1 or group_size < 1:
        raise ValueError(f"need groups >= 1 and group_size >= 1, got {groups}, {group_size}")
    env_ids: Sequence[str] = list(env_weights)
    weights = np.asarray([float(env_weights[e]) for e in env_ids], dtype=np.float64)
    if len(env_ids) == 0 or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"env mixture needs >= 1 env with positive total weight, got {dict(env_weights)}")
    rng = np.random.default_rng(np.random.SeedSequence([run_seed, iteration, _TAG_MIX]))
    choices = rng.choice(len(env_ids), size=groups, p=weights / weights.sum())
    return [
        GroupSeeds(
            iteration=iteration,
            group=g,
            env_id=env_ids[int(choices[g])],
            env_seed=env_seed(run_seed, iteration, g),
            sample_seeds=tuple(sample_seed(run_seed, iteration, g, m) for m in range(group_size)),
            hinted=hinted_members(run_seed, iteration, g, group_size, hint_fraction),
        )
        for g in range(groups)
    ]
