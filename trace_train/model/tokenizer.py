"""A small byte-level BPE tokenizer trained locally, with atomic entity ids and chat special tokens.

Measured (``reference/tiny-model-atomic-ids.md``): a tiny model learns to copy an entity id from the
context only when the id is ONE token. ``build_tokenizer`` therefore trains a byte-level BPE (digits
split individually) on the given corpus and then adds every atomic id as a whole added token; the
added-token matcher runs before pre-tokenization, so a quote, space or ``#`` around the id never
splits it. Training has no randomness: the same inputs give a byte-identical ``tokenizer.json``.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from trace_train.model.chat_template import chat_template

logger = logging.getLogger(__name__)

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOL_RESPONSE_START = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"

#: Control tokens that are "special" (dropped by ``decode(skip_special_tokens=True)``).
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
#: Markup tokens that stay visible in decoded text (as in Qwen3).
MARKUP_TOKENS: tuple[str, ...] = (TOOL_CALL_START, TOOL_CALL_END, TOOL_RESPONSE_START, TOOL_RESPONSE_END)


def _check_atomic(token: str) -> None:
    # The ByteLevel decoder maps added-token characters through its byte table, which only
    # round-trips ASCII; other characters would decode to mojibake.
    if not token or token != token.strip() or any(not (" " <= ch <= "~") for ch in token):
        raise ValueError(
            f"atomic token {token!r} must be non-empty printable ASCII without surrounding whitespace "
            "(byte-level decoding cannot round-trip other characters in added tokens)"
        )
    if token in SPECIAL_TOKENS or token in MARKUP_TOKENS:
        raise ValueError(f"atomic token {token!r} collides with a control token")


def _dedupe(tokens: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for tok in tokens:
        if tok not in seen:
            seen.add(tok)
            out.append(tok)
    return out


def build_tokenizer(
    corpus: Iterable[str],
    atomic_tokens: Sequence[str] = (),
    vocab_size: int = 1024,
    seed: int = 0,
    min_frequency: int = 2,
    max_texts: int | None = None,
    model_max_length: int = 4096,
    tools_style: str = "full",
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``corpus`` and add ``atomic_tokens`` as single whole tokens.

    ``vocab_size`` counts the 256 byte symbols, the control tokens and the merges (not the atomic
    tokens, which come on top). BPE training itself is deterministic; ``seed`` only picks the subset
    when ``max_texts`` caps the corpus. The result carries the Qwen3-style chat template, eos
    ``<|im_end|>`` and pad ``<|endoftext|>``. ``tools_style`` picks the template variant: ``full`` tool
    schemas, ``compact`` (name, description, argument types; ~22% fewer tokens per retail-sim
    episode) or ``none`` (tools never rendered); it is saved with the tokenizer.
    """
    template = chat_template(tools_style)
    texts = [t for t in corpus if t]
    if not texts:
        raise ValueError("build_tokenizer needs a non-empty corpus")
    if max_texts is not None and len(texts) > max_texts:
        keep = np.random.default_rng(seed).choice(len(texts), size=max_texts, replace=False)
        texts = [texts[i] for i in sorted(keep.tolist())]
    atomic = _dedupe(atomic_tokens)
    for tok in atomic:
        _check_atomic(tok)

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    base_size = backend.get_vocab_size()
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t in MARKUP_TOKENS])
    vocab = backend.get_vocab()
    fresh = [t for t in atomic if t not in vocab]
    # single_word: an id matches only as a whole word ("sam" in "same" stays text), while quotes,
    # spaces, '#' or brackets around it never split it.
    backend.add_tokens([AddedToken(t, normalized=False, special=False, single_word=True) for t in fresh])
    logger.info(
        "tokenizer: %d BPE tokens (%d requested), %d markup, %d atomic -> vocab %d",
        base_size, vocab_size, len(MARKUP_TOKENS), len(fresh), backend.get_vocab_size(),
    )

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = template
    return tokenizer


def atomic_token_ids(tokenizer: PreTrainedTokenizerFast, atomic_tokens: Sequence[str]) -> list[int]:
    """Ids of ``atomic_tokens``; raises if any of them is not a single token of ``tokenizer``."""
    ids = []
    for tok in atomic_tokens:
        tid = tokenizer.convert_tokens_to_ids(tok)
        if tid is None or tid == tokenizer.unk_token_id or tokenizer.convert_ids_to_tokens(tid) != tok:
            raise KeyError(f"{tok!r} is not a single token of this tokenizer")
        ids.append(tid)
    return ids


def chat_corpus(
    episodes: Iterable[tuple[Sequence[dict], Sequence[dict] | None]], tools_style: str = "full"
) -> Iterable[str]:
    """Render ``(messages, tools)`` episodes with the chat template: the chat part of a tokenizer corpus."""
    from trace_train.model.chat_template import render_chat

    template = chat_template(tools_style)
    for messages, tools in episodes:
        yield render_chat(messages, tools, chat_template=template)
