"""Episode-routed rollouts: route each episode once to one slot, then play it on that adapter.

Two routers use it. ``task_router`` policies: the paper's task-level baseline over TRACE's adapters -- at an
episode's start the base model (the composed model forced to slot 0) classifies the episode's first user message
with :class:`~trace_moe.routers.TaskLevelRouter` (top-1 over the capabilities' descriptions plus a "no adapter"
label), or, given a route corpus, with :class:`~trace_moe.retrieval_router.RetrievalRouter` (the paper's final
configs: the nearest solved requests narrow the candidates, the base classifies among those left). ``composed``
policies whose composition was trained with ``moe.gate.scope: episode``: the learned
:class:`~trace_moe.episode_router.EpisodeRouter` reads the same message. Every turn of that episode is then
generated with the composed model forced to the chosen slot.

Generation is :class:`~trace_train.rollout.hf.HFRolloutBackend`'s own loop. Each round, the live episodes
are grouped by slot (in request order) and each group is advanced under ``ComposedModel.forcing(slot)``
with an ``int`` slot: the exact single-adapter path, so a routed episode's tokens are those of the composed
policy forced to that slot. A per-row slot tensor is not used: it takes the mixed-adapter arithmetic and
does not follow the decode batch as finished rows leave it. Groups are chunked by ``max_batch`` after
grouping, so an episode is advanced with the same batch whether or not other slots share the rollout.

Every record's ``info["route"]`` is ``{"slot", "label", "scores", "similarities"}`` (``None`` when the env failed
at reset and nothing was routed; ``similarities`` is empty unless a retrieval router chose).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trace_envs.records import TrajectoryRecord
from trace_moe.composed import ComposedModel
from trace_moe.episode_router import BoundEpisodeRouter, EpisodeRouter
from trace_moe.retrieval_router import RetrievalRouter, load_route_corpus
from trace_moe.routers import (
    RouteDecision,
    TaskLevelRouter,
    composition_labels,
    first_user_message,
    single_token_labels,
)
from trace_train.rollout.base import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend, _Episode

logger = logging.getLogger(__name__)

_MAX_CACHED_ROUTES = 4096


class TaskRoutedRolloutBackend(HFRolloutBackend):
    """A composed model played one adapter per episode, the adapter chosen by an episode-level router
    (:class:`TaskLevelRouter`, :class:`RetrievalRouter` or :class:`BoundEpisodeRouter`: ``names``, ``model`` and
    ``route(text)``)."""

    def __init__(self, composed: ComposedModel, tokenizer: Any,
                 router: TaskLevelRouter | RetrievalRouter | BoundEpisodeRouter,
                 max_batch: int | None = None, **hf_kwargs: Any) -> None:
        if router.model is not composed:
            raise ValueError("the router must score with the composed model it routes (forced to slot 0)")
        if router.names != composed.slot_names:
            raise ValueError(f"router labels {router.names} do not match the composition's slots "
                             f"{composed.slot_names}")
        super().__init__(composed.model, tokenizer, max_batch=None, **hf_kwargs)
        self.composed = composed
        self.router = router
        self.slot_max_batch = max_batch  # applied per slot group (the parent's chunking is off)
        self._decisions: dict[str, RouteDecision] = {}  # first user message -> decision
        self._routes: dict[int, RouteDecision] = {}  # id(episode) -> decision, during one rollout

    def route(self, messages: Sequence[dict[str, Any]]) -> RouteDecision:
        """The decision for an episode's opening messages (cached by its first user message)."""
        text = first_user_message(messages)
        decision = self._decisions.get(text)
        if decision is None:
            if len(self._decisions) >= _MAX_CACHED_ROUTES:
                self._decisions.clear()
            decision = self.router.route(text)
            self._decisions[text] = decision
        return decision

    def rollout(self, requests: Sequence[EpisodeRequest], sampling: SamplingParams,
                adapter: str | None = None) -> list[TrajectoryRecord]:
        if adapter is not None:
            raise ValueError(f"a task_router policy chooses its adapter per episode; got adapter={adapter!r}")
        self._routes = {}
        try:
            return super().rollout(requests, sampling, None)
        finally:
            self._routes = {}

    # -- HFRolloutBackend hooks -----------------------------------------------------------------
    def _start(self, req: EpisodeRequest) -> _Episode:
        ep = super()._start(req)
        if ep.messages:  # empty only when the env raised in reset (the episode is already over)
            decision = self.route(ep.messages)
            self._routes[id(ep)] = decision
            logger.debug("%s seed %d -> slot %d (%s)", req.env_id, req.seed, decision.slot, decision.label)
        return ep

    def _advance(self, live: list[_Episode], sampling: SamplingParams) -> None:
        groups: dict[int, list[_Episode]] = {}
        for ep in live:
            groups.setdefault(self._routes[id(ep)].slot, []).append(ep)
        for slot in sorted(groups):
            group = groups[slot]
            chunk = self.slot_max_batch or len(group)
            with self.composed.forcing(slot):
                for start in range(0, len(group), chunk):
                    super()._advance(group[start:start + chunk], sampling)

    def _record(self, ep: _Episode, policy: str) -> TrajectoryRecord:
        record = super()._record(ep, policy)
        decision = self._routes.get(id(ep))
        record.info["route"] = None if decision is None else {
            "slot": decision.slot, "label": decision.label,
            "scores": {k: float(v) for k, v in decision.scores.items()},
            "similarities": {k: float(v) for k, v in decision.similarities.items()}}
        return record


def build_task_routed(model_dir: str, composed_dir: str, descriptions: dict[str, str] | None = None,
                      route_corpus: str | None = None, **hf_kwargs: Any) -> TaskRoutedRolloutBackend:
    """Load the base in ``model_dir`` and the composition in ``composed_dir``; the router labels the adapters
    with ``descriptions`` (else the composition's saved ones, see :func:`trace_moe.routers.composition_labels`).
    With ``route_corpus`` (a file written by :func:`trace_moe.retrieval_router.write_route_corpus`) the router
    retrieves first (:class:`~trace_moe.retrieval_router.RetrievalRouter`).

    Label strings are letters that are one token each for this tokenizer (``single_token_labels``; the plain
    letters A, B, … when there are not enough), so no label is penalised for its length."""
    from trace_train.model import load_policy

    if not Path(composed_dir).is_dir():
        raise ValueError(f"a task_router policy needs adapter=<directory written by trace-rl compose>; "
                         f"{composed_dir} is not a directory")
    labels = composition_labels(composed_dir, descriptions)  # fails before any model is loaded
    corpus = load_route_corpus(route_corpus) if route_corpus else None
    model, tokenizer = load_policy(model_dir)
    composed = ComposedModel.load(composed_dir, model=model)
    router = TaskLevelRouter(composed, tokenizer, labels, label_strings=single_token_labels(tokenizer, len(labels) + 1))
    if corpus is not None:
        router = RetrievalRouter(router, corpus)
        logger.info("retrieval over %s", ", ".join(f"{cap}: {len(texts)} requests" for cap, texts in corpus.items()))
    logger.info("task router over %s: %s", composed_dir, ", ".join(f"{lab.name}: {lab.description}" for lab in labels))
    return TaskRoutedRolloutBackend(composed, tokenizer, router, **hf_kwargs)


def build_episode_routed(composed_dir: str, model: Any, tokenizer: Any, **hf_kwargs: Any) -> TaskRoutedRolloutBackend:
    """A composition trained with ``moe.gate.scope: episode`` on the loaded base ``model``: its learned router
    (``episode_router.*`` beside ``compose.json``) picks each episode's slot from the first user message."""
    from trace_train.model.rendering import ChatRenderer

    composed = ComposedModel.load(composed_dir, model=model)
    router = BoundEpisodeRouter(EpisodeRouter.load(composed_dir), composed, ChatRenderer(tokenizer).request_ids)
    return TaskRoutedRolloutBackend(composed, tokenizer, router, **hf_kwargs)
