"""Policy models: tokenizer with atomic ids, Qwen3-style chat template, model factory, rendering."""

from trace_train.model.chat_template import CHAT_TEMPLATE, chat_template, render_chat
from trace_train.model.factory import (
    PRESETS,
    PolicyLoadError,
    build_model,
    count_parameters,
    load_policy,
    model_config,
    policy_from_config,
    save_policy,
)
from trace_train.model.rendering import ChatRenderer, EncodedEpisode, TemplateDriftError, encode_episode
from trace_train.model.tokenizer import atomic_token_ids, build_tokenizer, chat_corpus

__all__ = [
    "CHAT_TEMPLATE",
    "PRESETS",
    "ChatRenderer",
    "EncodedEpisode",
    "PolicyLoadError",
    "TemplateDriftError",
    "atomic_token_ids",
    "build_model",
    "build_tokenizer",
    "chat_template",
    "chat_corpus",
    "count_parameters",
    "encode_episode",
    "load_policy",
    "model_config",
    "policy_from_config",
    "render_chat",
    "save_policy",
]
