"""Routing baselines: task-level classifier router, oracle router, static peft merge."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from peft import PeftModel
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

from trace_moe import CapabilityLabel, ComposedModel, OracleRouter, TaskLevelRouter, static_merge

from .moe_helpers import load_base, tiny_config

KEYWORDS = {"refund": ["refund", "money", "reimburse"], "exchange": ["swap", "exchange", "replace"],
            "lookup": ["status", "where", "track"], "base": ["hello", "thanks", "bye"]}
FILLER = ["please", "my", "order", "item", "today", "now", "i", "want", "to", "the", "a", "help"]
CAPS = [CapabilityLabel("refund", "return money for an order"),
        CapabilityLabel("exchange", "swap an item for another variant"),
        CapabilityLabel("lookup", "find order status and facts")]


def word_tokenizer() -> PreTrainedTokenizerFast:
    template = "Pick skill that best handles request None of these answer with unmodified model Request Answer"
    words = {w for ws in KEYWORDS.values() for w in ws} | set(FILLER) | set(template.split())
    words |= {w for c in CAPS for w in c.description.split()} | {":", ".", "A", "B", "C", "D"}
    words = ["<pad>", "<unk>", *sorted(words)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")


def requests(rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    out = []
    names = list(KEYWORDS)
    for _ in range(n):
        name = names[rng.integers(len(names))]
        words = list(rng.choice(FILLER, size=4)) + [KEYWORDS[name][rng.integers(3)]]
        rng.shuffle(words)
        out.append((" ".join(words), name))
    return out


def train_classifier(router: TaskLevelRouter, steps: int = 150, seed: int = 0) -> None:
    """Teach the tiny base model to answer the router prompt with the right label (separable by keyword)."""
    rng = np.random.default_rng(seed)
    letter = dict(zip(router.names, [router.label_strings[-1]] + router.label_strings[:-1]))
    model = router.model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = requests(rng, 16)
        seqs = [router._encode(router.prompt(r)) + router._encode(" " + letter[name]) for r, name in batch]
        ids = torch.tensor(seqs)  # same length: the prompt template has a fixed word count
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits[:, -2], ids[:, -1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def test_task_level_router_scores_and_separable_case():
    tok = word_tokenizer()
    torch.manual_seed(0)  # test-only: HF init draws from the global generator
    model = Qwen3ForCausalLM(tiny_config(vocab=len(tok))).eval()
    router = TaskLevelRouter(model, tok, CAPS)
    assert router.names == ["base", "refund", "exchange", "lookup"]
    assert "D: None of these" in router.prompt("x")
    decision = router.route([{"role": "system", "content": "hi"}, {"role": "user", "content": "my refund please"}])
    assert decision.label in router.names and set(decision.scores) == set(router.names)
    assert all(s < 0 for s in decision.scores.values())
    # the score is the log-prob of the label token after the prompt
    ids = torch.tensor([router._encode(router.prompt("my refund please"))])
    with torch.no_grad():
        logp = model(input_ids=ids).logits[0, -1].log_softmax(-1)
    assert decision.scores["exchange"] == pytest.approx(float(logp[tok.convert_tokens_to_ids("B")]), abs=1e-5)
    probs = router.probabilities(decision.scores)
    assert sum(probs.values()) == pytest.approx(1.0)

    train_classifier(router)
    held_out = requests(np.random.default_rng(99), 40)
    picked = [router.route(r) for r, _ in held_out]
    accuracy = np.mean([d.label == name for d, (_, name) in zip(picked, held_out)])
    assert accuracy >= 0.9, accuracy
    assert {d.slot for d in picked} == {0, 1, 2, 3}


@torch.no_grad()
def test_oracle_router_and_static_merge(tiny):
    base_path, adapter_paths = tiny
    composed = ComposedModel.from_pretrained(base_path, adapter_paths)
    oracle = OracleRouter(composed.slot_names)
    assert oracle.route("cap1").slot == 2 and oracle.route(None).slot == 0 and oracle.route(3).label == "cap2"
    with pytest.raises(ValueError, match="unknown capability"):
        oracle.route("nope")
    ids = torch.randint(0, 300, (2, 7), generator=torch.Generator().manual_seed(5))
    adapter1 = PeftModel.from_pretrained(load_base(base_path), str(adapter_paths[1])).eval()(ids).logits
    with oracle.forcing(composed, "cap1"):
        assert torch.equal(composed(ids).logits, adapter1)
    one_hot = static_merge(load_base(base_path), adapter_paths, weights=[0.0, 1.0, 0.0])
    torch.testing.assert_close(one_hot(ids).logits, adapter1, rtol=1e-4, atol=1e-4)
    uniform = static_merge(load_base(base_path), adapter_paths)(ids).logits
    base = load_base(base_path)(ids).logits
    assert (uniform - adapter1).abs().max() > 1e-2 and (uniform - base).abs().max() > 1e-2
