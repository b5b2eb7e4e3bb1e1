"""What a model's files say about its tokens, shared by the ``hf`` and ``openai`` backends so both end turns
on the same ids: the stop ids (``<|im_end|>`` plus the generation config's eos ids) and the vocabulary size.

The ``hf`` backend reads the loaded model's ``generation_config``; the ``openai`` backend has no model, so it
reads the same files from the served model's local directory (:func:`load_model_files`), falling back as
transformers does when a model has no ``generation_config.json`` (the eos id of ``config.json``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def stop_token_ids(end_id: int, generation_config: Any) -> set[int]:
    """``end_id`` and every eos id of ``generation_config`` (an int, a list, or None)."""
    eos = getattr(generation_config, "eos_token_id", None)
    eos = eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else []
    return {end_id, *eos}


@dataclass(frozen=True)
class ModelFiles:
    """The parts of a model directory the ``openai`` backend needs (``None``: not known)."""

    generation_config: Any = None
    vocab_size: int | None = None


def load_model_files(source: str | None) -> ModelFiles:
    """The generation config and ``vocab_size`` of the model at ``source`` (a local directory; anything else,
    e.g. a hub name, is not fetched and gives an empty :class:`ModelFiles`, with a warning)."""
    if not source or not Path(source).expanduser().is_dir():
        logger.warning("%r is not a local model directory: its generation config (other eos ids) and vocabulary "
                       "size are unknown, so only <|im_end|> ends a turn and token ids are checked against the "
                       "tokenizer alone", source)
        return ModelFiles()
    from transformers import AutoConfig, GenerationConfig

    path = str(Path(source).expanduser())
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:  # e.g. a directory holding only the tokenizer
        logger.warning("no model config in %s (%s): only <|im_end|> ends a turn and token ids are checked against "
                       "the tokenizer alone", path, exc)
        return ModelFiles()
    try:
        generation = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: transformers derives it from config.json
        generation = GenerationConfig.from_model_config(config)
    vocab = getattr(config, "vocab_size", None)
    if vocab is None:  # multimodal configs keep it on their text config
        vocab = getattr(getattr(config, "get_text_config", lambda: None)(), "vocab_size", None)
    return ModelFiles(generation, int(vocab) if vocab else None)
