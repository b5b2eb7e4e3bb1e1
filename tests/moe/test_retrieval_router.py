"""Retrieval-augmented task routing: candidates from the nearest solved requests, the base classifies among them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen3ForCausalLM

from trace_moe import TaskLevelRouter
from trace_moe.retrieval_router import (
    MeanPoolEmbedder,
    RetrievalConfig,
    RetrievalRouter,
    corpus_from_examples,
    load_route_corpus,
    write_route_corpus,
)

from .moe_helpers import tiny_config
from .test_routers import CAPS, KEYWORDS, word_tokenizer

CORPUS = {"refund": ["refund my order", "money back please"], "exchange": ["swap the item"],
          "lookup": ["where is my order"]}


class KeywordEmbedder:
    """Unit vectors over the keyword groups plus a constant axis: texts sharing a group are close."""

    def embed(self, texts):
        groups = list(KEYWORDS)
        out = []
        for text in texts:
            v = np.array([sum(w in KEYWORDS[g] for w in text.split()) for g in groups] + [0.3], dtype=float)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)


@pytest.fixture(scope="module")
def classifier():
    tok = word_tokenizer()
    torch.manual_seed(0)  # test-only: HF init draws from the global generator
    model = Qwen3ForCausalLM(tiny_config(vocab=len(tok))).eval()
    return TaskLevelRouter(model, tok, CAPS)


def test_the_classifier_lists_only_the_candidates_with_their_examples(classifier):
    prompt = classifier.prompt("refund or swap", candidates=["exchange", "refund"],
                               examples={"exchange": "swap the item"})
    options = prompt.split("\n")[1:4]
    assert options == ["A: swap an item for another variant Example: swap the item",
                       "B: return money for an order", "D: None of these: answer with the unmodified model."]
    scores = classifier.scores("refund or swap", candidates=["exchange", "refund"])
    assert list(scores) == ["base", "exchange", "refund"]
    ids = torch.tensor([classifier._encode(classifier.prompt("refund or swap", candidates=["exchange", "refund"]))])
    with torch.no_grad():
        logp = classifier.model(input_ids=ids).logits[0, -1].log_softmax(-1)
    letter = classifier.tokenizer.convert_tokens_to_ids
    assert scores["exchange"] == pytest.approx(float(logp[letter("A")]), abs=1e-5)
    assert scores["base"] == pytest.approx(float(logp[letter("D")]), abs=1e-5)
    decision = classifier.route("refund or swap", candidates=["exchange", "refund"])
    assert decision.label in scores and decision.slot == classifier.names.index(decision.label)
    for bad in (["nope"], ["refund", "refund"], []):
        with pytest.raises(ValueError, match="candidates must be distinct capability names"):
            classifier.scores("x", candidates=bad)


def test_one_capability_near_enough_is_the_route_without_classification(classifier):
    router = RetrievalRouter(classifier, CORPUS, KeywordEmbedder(), RetrievalConfig(top_k=5, min_similarity=0.9))
    decision = router.route([{"role": "user", "content": "i want a refund"}])
    assert (decision.label, decision.slot) == ("refund", classifier.names.index("refund"))
    assert decision.scores == {}  # no classification: one candidate passed the floor
    assert list(decision.similarities) == ["refund"] and decision.similarities["refund"] > 0.9


def test_several_candidates_go_to_the_classifier_in_similarity_order(classifier):
    router = RetrievalRouter(classifier, CORPUS, KeywordEmbedder(), RetrievalConfig(top_k=5, min_similarity=0.4))
    text = "refund money swap"  # two refund keywords, one exchange keyword
    found = router.candidates(text)
    assert [cap for cap, _, _ in found] == ["refund", "exchange"]
    assert found[0][1] > found[1][1] and found[1][2] == "swap the item"
    decision = router.route(text)
    expected = classifier.scores(text, candidates=["refund", "exchange"],
                                 examples={cap: example for cap, _, example in found})
    assert decision.scores == pytest.approx(expected)
    assert decision.label == max(expected, key=expected.get)
    assert list(decision.similarities) == ["refund", "exchange"]
    # without classification the most similar capability is the route
    plain = RetrievalRouter(classifier, CORPUS, KeywordEmbedder(), RetrievalConfig(min_similarity=0.4, classify=False))
    assert plain.route(text).label == "refund" and plain.route(text).scores == {}


def test_the_floor_keeps_the_single_best_when_nothing_passes_and_top_k_bounds_the_neighbours(classifier):
    strict = RetrievalRouter(classifier, CORPUS, KeywordEmbedder(), RetrievalConfig(min_similarity=0.999))
    assert [cap for cap, _, _ in strict.candidates("where swap")] in (["lookup"], ["exchange"])
    nearest = RetrievalRouter(classifier, CORPUS, KeywordEmbedder(), RetrievalConfig(top_k=1, min_similarity=-1.0))
    assert [cap for cap, _, _ in nearest.candidates("refund money swap")] == ["refund"]
    loose = RetrievalRouter(classifier, CORPUS, KeywordEmbedder(), RetrievalConfig(top_k=5, min_similarity=-1.0))
    assert sorted(cap for cap, _, _ in loose.candidates("refund")) == ["exchange", "lookup", "refund"]


def test_corpus_files_and_bad_corpora(classifier, tmp_path):
    pairs = [("refund", "refund my order"), ("refund", "refund my order"), ("lookup", " "), ("lookup", "where")]
    assert corpus_from_examples(pairs) == {"refund": ["refund my order"], "lookup": ["where"]}
    path = write_route_corpus(tmp_path / "corpus.json", CORPUS)
    assert load_route_corpus(path) == CORPUS
    with pytest.raises(FileExistsError, match="already exists"):
        write_route_corpus(path, CORPUS)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        load_route_corpus(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="does not exist"):
        load_route_corpus(tmp_path / "missing.json")
    for bad in ({}, {"refund": []}, {"refund": "refund my order"}, {"refund": ["", "x"]}):
        with pytest.raises(ValueError, match="route corpus|request strings"):
            RetrievalRouter(classifier, bad, KeywordEmbedder())
    with pytest.raises(ValueError, match=r"capabilities \['billing'\] are not among"):
        RetrievalRouter(classifier, {"billing": ["pay"]}, KeywordEmbedder())
    with pytest.raises(ValueError, match="top_k"):
        RetrievalConfig(top_k=0)


def test_mean_pool_embedder_is_the_unit_mean_of_a_layers_states(classifier):
    embedder = MeanPoolEmbedder(classifier.model, classifier.tokenizer, layer=-1)
    vectors = embedder.embed(["refund my order", "where is my order"])
    assert vectors.shape == (2, classifier.model.config.hidden_size)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    ids = torch.tensor([classifier._encode("refund my order")])
    with torch.no_grad():
        states = classifier.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].mean(0)
    assert np.allclose(vectors[0], (states / states.norm()).numpy(), atol=1e-5)
    first = MeanPoolEmbedder(classifier.model, classifier.tokenizer, layer=1).embed(["refund my order"])
    assert not np.allclose(first[0], vectors[0])  # the layer is honoured
