"""Windowed delta rendering gives exactly the text (and ids) of a full re-render of the history."""

import random

import pytest

from trace_train.model.chat_template import TOOLS_STYLES, chat_template
from trace_train.model.rendering import ChatRenderer

TOOLS = [
    {"type": "function", "function": {"name": "get_order", "description": "Look up an order.",
                                      "parameters": {"type": "object",
                                                     "properties": {"order_id": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "refund", "description": "",
                                      "parameters": {"type": "object", "properties": {
                                          "order_id": {"type": "string"}, "amount": {"type": "number"}}}}},
]
WORDS = ["order", "#W1001", "refund", "ok", "<|im_end|>", "\n", "é", "{}", "</tool_call>", "42", "user", " "]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(WORDS) + rng.choice(["", " ", "\n"]) for _ in range(rng.randint(0, 6)))


def _call(rng: random.Random) -> dict:
    args = {"order_id": _text(rng), "amount": rng.randint(0, 9)}
    fn = {"name": rng.choice(["get_order", "refund"]), "arguments": args if rng.random() < 0.5 else str(args)}
    return {"id": f"c{rng.randint(0, 99)}", "type": "function", "function": fn}


def _assistant(rng: random.Random) -> dict:
    kind = rng.randrange(5)
    if kind == 0:
        return {"role": "assistant", "content": _text(rng)}
    if kind == 1:  # raw policy text with its tool call, as the rollout backends record it
        content = _text(rng) + '\n<tool_call>\n{"name":"get_order","arguments":{}}\n</tool_call>'
        return {"role": "assistant", "content": content, "tool_calls": [_call(rng)]}
    if kind == 2:
        return {"role": "assistant", "content": None, "tool_calls": [_call(rng) for _ in range(rng.randint(1, 3))]}
    if kind == 3:
        return {"role": "assistant", "content": _text(rng), "tool_calls": [_call(rng)]}
    return {"role": "assistant", "content": ""}


def _observation(rng: random.Random) -> list[dict]:
    out = []
    for _ in range(rng.randint(0, 4)):
        kind = rng.randrange(5)
        if kind <= 1:
            out.append({"role": "tool", "name": "get_order", "tool_call_id": "c1", "content": _text(rng)})
        elif kind == 2:
            out.append({"role": "tool", "name": "refund", "content": {"status": _text(rng), "n": 3}})
        elif kind == 3:
            out.append({"role": "user", "content": _text(rng)})
        else:
            out.append({"role": "system", "content": _text(rng)})
    return out


def _conversation(rng: random.Random) -> list[dict]:
    messages = [{"role": "system", "content": _text(rng)}] if rng.random() < 0.7 else []
    messages += _observation(rng) or [{"role": "user", "content": _text(rng)}]
    for _ in range(rng.randint(1, 5)):
        messages.append(_assistant(rng))
        messages += _observation(rng)
    return messages


@pytest.mark.parametrize("style", TOOLS_STYLES)
def test_cached_ids_equal_full_rerender_on_random_conversations(tokenizer, style):
    template = chat_template(style)
    fast = ChatRenderer(tokenizer, chat_template=template)
    full = ChatRenderer(tokenizer, chat_template=template, cached=False)
    assert fast.uses_cache and not full.uses_cache
    rng = random.Random(f"render-{style}")
    checked = 0
    for _ in range(150):
        messages = _conversation(rng)
        tools = TOOLS if rng.random() < 0.5 else None
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            assert fast.assistant_completion_ids(messages[:i], message, tools) == \
                full.assistant_completion_ids(messages[:i], message, tools)
            j = next((k for k in range(i + 1, len(messages)) if messages[k]["role"] == "assistant"), len(messages))
            new = messages[i + 1:j]
            text = fast.observation_delta_text(messages[:i + 1], new, tools)
            assert text == full.observation_delta_text(messages[:i + 1], new, tools)
            assert fast.observation_delta_ids(messages[:i + 1], new, tools) == full.encode(text)
            checked += 1
        a, b = fast.encode_episode(messages, tools), full.encode_episode(messages, tools)
        assert (a.ids, a.loss_mask, a.turns) == (b.ids, b.loss_mask, b.turns)
    assert checked > 300


def test_delta_of_a_known_conversation(tokenizer):
    """Pins the delta layout itself, so a windowing bug shared by both paths cannot pass unnoticed."""
    renderer = ChatRenderer(tokenizer, chat_template=chat_template("full"))
    history = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "A"}]
    new = [{"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}, {"role": "user", "content": "u"}]
    assert renderer.observation_delta_text(history, new, TOOLS) == (
        "\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>"
        "<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n")
    assert renderer.observation_delta_text(history, [], TOOLS) == "\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="follow an assistant"):
        renderer.observation_delta_text(history[:2], new, TOOLS)


def test_other_templates_are_always_fully_rerendered(tokenizer):
    """A template whose earlier turns depend on the whole conversation (here: the number of messages is
    rendered into the header) must not be windowed or memoised; its drift is still detected."""
    counting = ("{{- '<|im_start|>system\\n' + (messages | length | string) + '<|im_end|>\\n' -}}"
                "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' -}}"
                "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
    renderer = ChatRenderer(tokenizer, chat_template=counting)
    assert not renderer.uses_cache
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "A"}]
    from trace_train.model.rendering import TemplateDriftError

    with pytest.raises(TemplateDriftError):
        renderer.observation_delta_text(history, [{"role": "user", "content": "u"}], None)
