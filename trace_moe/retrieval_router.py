"""Retrieval-augmented task-level routing: the paper's final-config task router ("RAC", §5.1).

A route corpus holds, per capability, requests (first user messages) that its training env's episodes solved.
A new request is embedded, its ``top_k`` nearest corpus requests by cosine similarity are retrieved, those below
``min_similarity`` are dropped (the single best is kept when none pass), and the survivors are deduplicated to
capabilities ordered by their best similarity. One capability left: it is the route, no classification. Several:
the base model classifies among only those candidates (and the "no adapter" label), each listed with its
description and its best retrieved request (:meth:`TaskLevelRouter.route` with ``candidates`` and ``examples``);
``classify=False`` takes the most similar capability instead.

The paper embeds with a separate instruction-tuned embedding model; :class:`MeanPoolEmbedder` embeds with the
routed base itself (the mean of a layer's hidden states over the request's tokens, composed models forced to the
base slot), so the router needs no second model. Any object with ``embed(texts) -> (n, d) array`` can replace it.

The corpus file is JSON ``{capability: [request, ...]}`` (:func:`write_route_corpus`, :func:`load_route_corpus`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from trace_moe.routers import RouteDecision, TaskLevelRouter, _base_only, first_user_message


@dataclass(frozen=True)
class RetrievalConfig:
    """Retrieval settings (the paper's final configs: five neighbours, similarity floor 0.5, then classify)."""

    top_k: int = 5
    min_similarity: float = 0.5
    classify: bool = True

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if not -1.0 <= self.min_similarity <= 1.0:
            raise ValueError(f"min_similarity is a cosine similarity in [-1, 1], got {self.min_similarity}")


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class MeanPoolEmbedder:
    """Unit-norm mean of ``layer``'s hidden states over a text's tokens (a ComposedModel is forced to slot 0)."""

    def __init__(self, model: nn.Module, tokenizer: Any, layer: int = -1) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.layer = layer

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = []
        with _base_only(self.model):
            device = next(self.model.parameters()).device
            for text in texts:
                ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
                if not ids:
                    raise ValueError(f"cannot embed {text!r}: it encodes to no tokens")
                out = self.model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True,
                                 use_cache=False)
                vector = out.hidden_states[self.layer][0].float().mean(0).cpu().numpy()
                vectors.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
        return np.stack(vectors)


def corpus_from_examples(examples: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``{capability: [request, ...]}`` from ``(capability, request)`` pairs: first occurrence order, no
    duplicate request within a capability, blank requests dropped."""
    corpus: dict[str, list[str]] = {}
    for capability, text in examples:
        texts = corpus.setdefault(capability, [])
        if text.strip() and text not in texts:
            texts.append(text)
    return {cap: texts for cap, texts in corpus.items() if texts}


def write_route_corpus(path: str | Path, corpus: Mapping[str, Sequence[str]]) -> Path:
    """Write a route corpus atomically; an existing file is not overwritten."""
    from trace_envs.records import write_json_atomic

    path = Path(path)
    _check_corpus(corpus, str(path))
    if path.exists():
        raise FileExistsError(f"{path} already exists; remove it to write a new route corpus")
    return write_json_atomic(path, {cap: list(texts) for cap, texts in corpus.items()})


def load_route_corpus(path: str | Path) -> dict[str, list[str]]:
    """Read a route corpus written by :func:`write_route_corpus` (``ValueError`` on a malformed file)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"route corpus {path} does not exist")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"route corpus {path} is not JSON: {exc}") from None
    _check_corpus(doc, str(path))
    return {str(cap): list(texts) for cap, texts in doc.items()}


def _check_corpus(corpus: Any, where: str) -> None:
    if not isinstance(corpus, Mapping) or not corpus:
        raise ValueError(f"{where}: a route corpus is a non-empty JSON object {{capability: [request, ...]}}")
    for cap, texts in corpus.items():
        if (not isinstance(texts, Sequence) or isinstance(texts, str) or not texts
                or not all(isinstance(t, str) and t.strip() for t in texts)):
            raise ValueError(f"{where}: capability {cap!r} needs a non-empty list of request strings")


class RetrievalRouter:
    """Routes a request by its nearest solved requests, then (several candidates left) by the base classifier.

    ``classifier`` supplies the slot names (``['base', capabilities...]``), the model and the descriptions; every
    corpus capability must be one of its capabilities (one without corpus entries is never retrieved).
    """

    def __init__(self, classifier: TaskLevelRouter, corpus: Mapping[str, Sequence[str]],
                 embedder: Embedder | None = None, config: RetrievalConfig = RetrievalConfig()) -> None:
        _check_corpus(corpus, "route corpus")
        unknown = sorted(set(corpus) - set(classifier.names[1:]))
        if unknown:
            raise ValueError(f"route corpus capabilities {unknown} are not among the router's "
                             f"{classifier.names[1:]}")
        self.classifier = classifier
        self.config = config
        self.embedder = embedder or MeanPoolEmbedder(classifier.model, classifier.tokenizer)
        self.texts = [t for texts in corpus.values() for t in texts]
        self.owners = [cap for cap, texts in corpus.items() for _ in texts]
        self.vectors = self.embedder.embed(self.texts)

    @property
    def names(self) -> list[str]:
        return self.classifier.names

    @property
    def model(self) -> nn.Module:
        return self.classifier.model

    def candidates(self, request: str) -> list[tuple[str, float, str]]:
        """``(capability, best similarity, its most similar corpus request)``, most similar first."""
        query = self.embedder.embed([request])[0]
        sims = self.vectors @ query
        top = np.argsort(-sims, kind="stable")[: self.config.top_k]
        kept = [j for j in top if sims[j] >= self.config.min_similarity] or [top[0]]
        best: dict[str, tuple[float, str]] = {}
        for j in kept:  # kept is in decreasing similarity: the first hit of a capability is its best
            best.setdefault(self.owners[j], (float(sims[j]), self.texts[j]))
        return [(cap, sim, text) for cap, (sim, text) in best.items()]

    def route(self, request: str | Sequence[Mapping[str, Any]]) -> RouteDecision:
        """The slot for a request text (or a message list: its first user message)."""
        text = request if isinstance(request, str) else first_user_message(request)
        found = self.candidates(text)
        similarities = {cap: sim for cap, sim, _ in found}
        if len(found) == 1 or not self.config.classify:
            cap = found[0][0]
            return RouteDecision(slot=self.names.index(cap), label=cap, scores={}, similarities=similarities)
        decision = self.classifier.route(text, candidates=[cap for cap, _, _ in found],
                                         examples={cap: example for cap, _, example in found})
        decision.similarities = similarities
        return decision
