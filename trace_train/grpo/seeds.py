"""Deterministic seeds for seeded-group GRPO.

Every number is a pure function of ``(run seed, iteration, group index[, member index])`` through
``numpy.random.SeedSequence``, so any rollout can be replayed and a resumed run sees exactly the
seeds an uninterrupted run would have seen. All G members of a group share one env seed (identical
initial state) and get distinct sampler seeds.

Each stream's entropy is ``[run_seed, iteration, <its own fields>, <its tag>]`` (words counted for entries below
2**32; a larger run seed takes more words, and the tag stays last):

=================  ============================================  =====
stream             entropy                                        words
=================  ============================================  =====
env seed           ``[seed, it, group, _TAG_ENV=0]``               4
hinted members     ``[seed, it, group, _TAG_HINT=4]``              4
update seed        ``[seed, it, rank, _TAG_UPDATE=5]``             4
sampler seed       ``[seed, it, group, member, _TAG_SAMPLE=1]``    5
shuffle            ``[seed, it, epoch, rank, _TAG_SHUFFLE=3]``     5
env mixture        ``[seed, it, 0, 0, _TAG_MIX=2]``                5
=================  ============================================  =====

The rule that keeps them apart: **no stream's entropy may end in 0 unless its length alone separates it**, and
two streams of one length need different tags. ``SeedSequence`` pads an entropy of fewer than 4 words (its pool
size) with zeros, so ``[a, b, c]`` and ``[a, b, c, 0]`` are one and the same state (only words past the fourth
are mixed in as written). The env seed's tag is 0 (kept: changing it would change every env seed, hence every
published figure), so its 4 words read as any shorter entropy with the same leading words: no stream here may be
shorter than 4 words. The env mixture once used ``[seed, it, 2]``, which is exactly the env-seed stream of group 2
in the same iteration (the mixture's env choice was drawn from the state group 2's env seed came from); it is 5
words now, which also keeps it apart from every 4-word stream elsewhere (the TRL adapter's ``member_seed`` covers
all of them).
Changing the mixture stream (session 44) changed every env-mixture draw: runs that train one adapter on several envs
(the replication's mixture row, gates trained by GRPO on the mixture, multi-domain capability training) draw other
envs per group than before, and a run resumed across the change sees a different mixture from then on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from trace_envs.hints import hinted_count
from trace_envs.splits import SPLITS

# Domain tags keep the streams for env seeds, sampler seeds, env choice and shuffling independent (each stream ends
# in its tag; see the module docstring for why no stream may be shorter than 4 words).
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


def mixture_seed_sequence(run_seed: int, iteration: int) -> np.random.SeedSequence:
    """The stream of one iteration's env-mixture draw: 5 words ending in its tag, so it is no env-seed stream
    (``[run_seed, iteration, _TAG_MIX]`` was group ``_TAG_MIX``'s; see the module docstring)."""
    return np.random.SeedSequence([run_seed, iteration, 0, 0, _TAG_MIX])


@dataclass(frozen=True)
class GroupSeeds:
    """The seeds of one group: which env, its env seed and one sampler seed per member."""

    iteration: int
    group: int
    env_id: str
    env_seed: int
    sample_seeds: tuple[int, ...]
    hinted: tuple[int, ...] = ()  # member indices that play with the env's hint
    twin: bool = False  # plays the counterfactual twin of the previous group's task (same env and env seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_iteration(
    run_seed: int,
    iteration: int,
    groups: int,
    group_size: int,
    env_weights: Mapping[str, float],
    hint_fraction: float = 0.0,
    twin_groups: bool = False,
) -> list[GroupSeeds]:
    """Seeds for every group of one iteration; the env of each group is drawn from the weighted mixture.

    With a single env id the draw is trivial. The mixture draw uses its own seeded stream, so adding a
    group never changes the env seeds of the others. With ``twin_groups`` group ``2k + 1`` takes group ``2k``'s env
    and env seed and plays its counterfactual twin (``GroupSeeds.twin``); sampler seeds and hinted members stay
    per group.
    """
    if groups < 1 or group_size < 1:
        raise ValueError(f"need groups >= 1 and group_size >= 1, got {groups}, {group_size}")
    env_ids: Sequence[str] = list(env_weights)
    weights = np.asarray([float(env_weights[e]) for e in env_ids], dtype=np.float64)
    if len(env_ids) == 0 or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"env mixture needs >= 1 env with positive total weight, got {dict(env_weights)}")
    rng = np.random.default_rng(mixture_seed_sequence(run_seed, iteration))
    if twin_groups and groups % 2:
        raise ValueError(f"twin groups come in pairs; got {groups} groups")
    choices = rng.choice(len(env_ids), size=groups, p=weights / weights.sum())

    def source(g: int) -> int:  # the group whose env and env seed group g plays
        return g - g % 2 if twin_groups else g

    return [
        GroupSeeds(
            iteration=iteration,
            group=g,
            env_id=env_ids[int(choices[source(g)])],
            env_seed=env_seed(run_seed, iteration, source(g)),
            sample_seeds=tuple(sample_seed(run_seed, iteration, g, m) for m in range(group_size)),
            hinted=hinted_members(run_seed, iteration, g, group_size, hint_fraction),
            twin=twin_groups and g % 2 == 1,
        )
        for g in range(groups)
    ]
