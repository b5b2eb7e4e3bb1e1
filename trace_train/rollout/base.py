"""The rollout interface every backend implements (DESIGN.md §3).

A backend plays many episodes together and returns one ``TrajectoryRecord`` per request. Records
from our backends carry the full token sequence of the episode (``token_ids``), a ``loss_mask`` that
is 1 exactly on tokens the policy sampled, and the sampler's log-probs aligned with ``token_ids``
(0.0 where the mask is 0). The trainer consumes those ids as they are: no re-tokenization.

An env that raises in ``reset`` or ``step`` ends only its own episode: the record is a normal failed
trajectory (reward 0, success False) with termination ``ENV_ERROR`` and ``info["env_error"]`` from
``env_error_info``; a warning is logged and the rest of the batch goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from trace_envs.core.parsing import scrub_surrogates
from trace_envs.records import TrajectoryRecord

ENV_ERROR = "env_error"  # termination of an episode whose env raised
_MAX_ERROR_CHARS = 2000


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
    twin: bool = False  # reset with options={"twin": True}: the env's counterfactual twin of the seed's task

    def reset_options(self) -> dict[str, Any] | None:
        options = {key: True for key, on in (("hint", self.hint), ("twin", self.twin)) if on}
        return options or None


def group_requests(env_id: str, env_kwargs: dict[str, Any], seeds: Sequence[int], group_size: int = 1,
                   sample_seed: int = 0, hinted: Sequence[int] = ()) -> list[EpisodeRequest]:
    """``group_size`` members per env seed, group ``g`` = the g-th seed; members of a group share the env
    seed and differ in their sampler seed (``sample_seed * 100_003 + member``); members in ``hinted``
    play with the env's hint."""
    return [EpisodeRequest(env_id, seed=int(seed), sample_seed=sample_seed * 100_003 + member,
                           env_kwargs=dict(env_kwargs), group=g, hint=member in hinted)
            for g, seed in enumerate(seeds) for member in range(group_size)]


def env_error_info(exc: BaseException, stage: str, turn: int) -> dict[str, Any]:
    """``info["env_error"]`` of an ``ENV_ERROR`` record: exception type and (clipped, UTF-8 safe)
    message, the stage (``reset`` | ``step``) and the policy turn it happened on (0 for reset)."""
    try:
        message = scrub_surrogates(str(exc))[0]
    except Exception:  # an exception whose __str__ fails still ends its episode cleanly
        message = "<unprintable exception>"
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "..."
    return {"type": type(exc).__name__, "message": message, "stage": stage, "turn": int(turn)}


def prompt_did_not_fit(record: TrajectoryRecord) -> bool:
    """Whether a model backend's episode ended before its first turn because its first prompt did not fit the
    context (``context_limit`` with no turn played); such an episode says nothing about the policy."""
    return record.termination == "context_limit" and record.info.get("turn_spans") == []


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
