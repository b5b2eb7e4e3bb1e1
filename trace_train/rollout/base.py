"""The rollout interface every backend implements (DESIGN.md §3).

A backend plays many episodes together and returns one ``TrajectoryRecord`` per request. Records
from our backends carry the full token sequence of the episode (``token_ids``), a ``loss_mask`` that
is 1 exactly on tokens the policy sampled, and the sampler's log-probs aligned with ``token_ids``
(0.0 where the mask is 0). The trainer consumes those ids as they are: no re-tokenization.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from trace_train.trajectory import TrajectoryRecord


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    greedy: bool = False


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to play: env id + kwargs, the env seed, and the sampler seed of this member.

    ``hint``: reset the env with ``options={"hint": True}`` (paper §3.5); the record then carries
    ``info['hint']`` with the unhinted prompt's token ids, which the GRPO trainer swaps back in."""

    env_id: str
    seed: int
    sample_seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    group: int = 0
    hint: bool = False

    def reset_options(self) -> dict[str, Any] | None:
        return {"hint": True} if self.hint else None


def group_requests(env_id: str, env_kwargs: dict[str, Any], seeds: Sequence[int], group_size: int = 1,
                   sample_seed: int = 0, hinted: Sequence[int] = ()) -> list[EpisodeRequest]:
    """``group_size`` members per env seed, group ``g`` = the g-th seed; members of a group share the env
    seed and differ in their sampler seed (``sample_seed * 100_003 + member``); members in ``hinted``
    play with the env's hint."""
    return [EpisodeRequest(env_id, seed=int(seed), sample_seed=sample_seed * 100_003 + member,
                           env_kwargs=dict(env_kwargs), group=g, hint=member in hinted)
            for g, seed in enumerate(seeds) for member in range(group_size)]


class RolloutBackend(Protocol):
    """Plays episodes with a (possibly adapted) policy."""

    def rollout(
        self,
        requests: Sequence[EpisodeRequest],
        sampling: SamplingParams,
        adapter: str | None = None,
    ) -> list[TrajectoryRecord]:
        """Play every request to the end; one record per request, in request order."""
        ...
