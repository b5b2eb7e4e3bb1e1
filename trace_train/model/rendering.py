"""Token-level rendering of chat episodes: the ONE place that turns messages into token ids.

Both the rollout backends and behaviour cloning build an episode's token stream the same way:

* the initial prompt (system + tools + first observation + generation prompt), mask 0;
* each assistant turn: the completion ids, ending with ``<|im_end|>``, mask 1;
* each observation: a *delta* rendered from the chat template (the text the template adds after
  the assistant's ``<|im_end|>``: newline, new turns, generation prompt), encoded on its own, mask 0.

Earlier text is never re-tokenized, so sampled ids stay exactly as sampled. The stream ends at the
last assistant ``<|im_end|>``; messages after it carry no loss and are not encoded.

Rendering a delta by re-rendering the whole history costs O(history) per turn (twice). For our own
templates (``chat_template.chat_template``), which render each message from the message alone (a tool
message also looks at its neighbours' roles; the system header depends only on ``messages[0]`` and the
tools), a delta after an assistant message is rendered from a *window*: that assistant message and the
new ones, without tools. Such a delta depends on the new messages only, so its ids are memoised (an LRU
keyed by the messages' JSON), as are first prompts (the members of a group share theirs) and assistant
completions. The ids are the same as a full re-render's (``tests/model/test_rendering_cache.py``). Any
other template is always fully re-rendered and nothing is memoised.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

from transformers import PreTrainedTokenizerBase

from trace_train.model.chat_template import TOOLS_STYLES, chat_template, render_chat

IM_END = "<|im_end|>"

# Templates known to render a message independently of the messages before the previous one (see above).
_WINDOWED_TEMPLATES = frozenset(chat_template(style) for style in TOOLS_STYLES)
MEMO_SIZE = 4096  # memoised id lists per renderer


def _memo_key(*parts: Any) -> str | None:
    """An exact key for JSON-shaped messages (``None``, i.e. not memoised, for anything else)."""
    try:
        return json.dumps(parts, ensure_ascii=False)
    except (TypeError, ValueError):
        return None


class TemplateDriftError(RuntimeError):
    """The chat template is not prefix-stable for this conversation (cannot render a delta)."""


@dataclass
class EncodedEpisode:
    """Token stream of one episode: ids, loss mask, and the (prompt_len, completion_len) of each turn."""

    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turns: list[tuple[int, int]] = field(default_factory=list)

    def extend(self, ids: Sequence[int], mask: int) -> None:
        self.ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))


class ChatRenderer:
    """Renders messages to token ids with a tokenizer's chat template (prefix-stable deltas).

    ``cached`` (default on): render deltas from a window of the conversation and memoise ids when the
    template is one of ours (same ids as a full re-render, see the module docstring); off, or for any other
    template, every delta re-renders the whole history.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, chat_template: str | None = None, cached: bool = True
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise ValueError("tokenizer has no chat template; pass chat_template=")
        self.cached = cached
        self._memo: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        end_id = tokenizer.convert_tokens_to_ids(IM_END)
        if end_id is None or tokenizer.convert_ids_to_tokens(end_id) != IM_END:
            raise ValueError(f"tokenizer has no single {IM_END} token")
        self.end_id: int = end_id

    @property
    def uses_cache(self) -> bool:
        """Whether deltas are windowed and ids memoised (``cached`` and the template is one of ours)."""
        return self.cached and self.chat_template in _WINDOWED_TEMPLATES

    def _memoised(self, key: str | None, make: Any) -> list[int]:
        if key is None:
            return make()
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = tuple(make())
            if len(self._memo) > MEMO_SIZE:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(key)
        return list(hit)

    def text(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict] | None, gen: bool) -> str:
        return render_chat(messages, tools, add_generation_prompt=gen, chat_template=self.chat_template)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict] | None) -> list[int]:
        """The first prompt of an episode (ends with the assistant generation prompt)."""
        if self.uses_cache:
            return self._memoised(_memo_key("prompt", messages, tools),
                                  lambda: self.encode(self.text(messages, tools, gen=True)))
        return self.encode(self.text(messages, tools, gen=True))

    def request_ids(self, text: str) -> list[int]:
        """A request rendered alone as one user turn (plus the generation prompt): what an episode router reads."""
        return self.prompt_ids([{"role": "user", "content": text}], None)

    def observation_delta_text(
        self, history: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], tools: Sequence[dict] | None
    ) -> str:
        """Text the template adds after the last assistant ``<|im_end|>`` of ``history`` for ``new``."""
        if not history or history[-1].get("role") != "assistant":
            raise ValueError("observation deltas follow an assistant message")
        if self.uses_cache:  # only the last assistant message and the new ones (no system header, no tools)
            history, tools = history[-1:], None
        before = self.text(history, tools, gen=False)
        cut = before.rfind(IM_END)
        if cut < 0:
            raise TemplateDriftError(f"rendered history has no {IM_END}")
        cut += len(IM_END)
        after = self.text(list(history) + list(new), tools, gen=True)
        if after[:cut] != before[:cut]:
            raise TemplateDriftError("chat template re-renders earlier turns differently when messages are added")
        return after[cut:]

    def observation_delta_ids(
        self, history: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], tools: Sequence[dict] | None
    ) -> list[int]:
        if self.uses_cache and history and history[-1].get("role") == "assistant":  # the delta depends on new only
            return self._memoised(_memo_key("delta", new),
                                  lambda: self.encode(self.observation_delta_text(history, new, tools)))
        return self.encode(self.observation_delta_text(history, new, tools))

    def assistant_completion_ids(
        self, history: Sequence[dict[str, Any]], message: dict[str, Any], tools: Sequence[dict] | None
    ) -> list[int]:
        """The ids a policy would sample for ``message`` after ``history`` (ends with ``<|im_end|>``)."""
        if self.uses_cache:  # an assistant message renders from itself alone after the generation prompt
            return self._memoised(_memo_key("completion", message),
                                  lambda: self._completion_ids([], message, None))
        return self._completion_ids(history, message, tools)

    def _completion_ids(
        self, history: Sequence[dict[str, Any]], message: dict[str, Any], tools: Sequence[dict] | None
    ) -> list[int]:
        prompt = self.text(history, tools, gen=True)
        full = self.text(list(history) + [message], tools, gen=False)
        if not full.startswith(prompt):
            raise TemplateDriftError("assistant message does not extend the generation prompt")
        rest = full[len(prompt):]
        end = rest.rfind(IM_END)
        if end < 0:
            raise TemplateDriftError(f"assistant turn does not end with {IM_END}")
        return self.encode(rest[: end + len(IM_END)])

    def encode_episode(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict] | None
    ) -> EncodedEpisode:
        """Ids and loss mask (1 on assistant tokens incl. ``<|im_end|>``) of a whole episode."""
        out = EncodedEpisode()
        first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
        if first is None:
            out.extend(self.prompt_ids(messages, tools), 0)
            return out
        out.extend(self.prompt_ids(messages[:first], tools), 0)
        last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
        i = first
        while i <= last:
            prompt_len = len(out.ids)
            completion = self.assistant_completion_ids(messages[:i], messages[i], tools)
            out.extend(completion, 1)
            out.turns.append((prompt_len, len(completion)))
            j = i + 1
            while j <= last and messages[j].get("role") != "assistant":
                j += 1
            if j <= last:  # an empty observation still adds the next generation prompt
                out.extend(self.observation_delta_ids(messages[: i + 1], messages[i + 1 : j], tools), 0)
            i = j
        return out


def encode_episode(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict] | None, tokenizer: PreTrainedTokenizerBase
) -> tuple[list[int], list[int]]:
    """Behaviour-cloning encoding: ``(ids, loss_mask)`` with mask 1 on assistant tokens incl. ``<|im_end|>``.

    Built exactly as the rollout backends build their streams (same template, same deltas).
    """
    enc = ChatRenderer(tokenizer).encode_episode(messages, tools)
    return enc.ids, enc.loss_mask
