import json

from tests.model.tiny_domain import EMAILS, ORDER_IDS, TOOLS, episode
from trace_envs.core.parsing import parse_assistant_text
from trace_train.model import encode_episode, render_chat
from trace_train.model.rendering import ChatRenderer


def _split_turns(text: str) -> list[tuple[str, str]]:
    turns = []
    for block in text.split("<|im_start|>")[1:]:
        role, _, body = block.partition("\n")
        assert body.endswith("<|im_end|>\n") or body.endswith("<|im_end|>") or body == ""
        turns.append((role, body.split("<|im_end|>")[0]))
    return turns


def test_render_and_parse_back():
    msgs = episode()
    text = render_chat(msgs, TOOLS, add_generation_prompt=True)
    turns = _split_turns(text)
    assert [r for r, _ in turns] == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user",
                                     "assistant", "assistant"]
    system = turns[0][1]
    tool_lines = system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in tool_lines] == TOOLS
    assistants = [body for role, body in turns if role == "assistant"][:-1]
    expected = [m for m in msgs if m["role"] == "assistant"]
    for body, msg in zip(assistants, expected):
        parsed = parse_assistant_text(body)
        assert parsed.errors == []
        assert parsed.content == msg["content"].strip()
        want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls", [])]
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == want
    assert "<tool_response>\n" + msgs[3]["content"] + "\n</tool_response>" in turns[3][1]
    assert text.endswith("<|im_start|>assistant\n")


def test_raw_assistant_text_renders_verbatim():
    raw = 'Checking.\n<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W1234567"}}\n</tool_call>'
    parsed = parse_assistant_text(raw)
    msg = {"role": "assistant", "content": raw,
           "tool_calls": [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                          for c in parsed.tool_calls]}
    text = render_chat([{"role": "user", "content": "hi"}, msg])
    assert text.endswith("<|im_start|>assistant\n" + raw + "<|im_end|>\n")


def test_tokenizer_template_matches_renderer(tokenizer):
    msgs = episode()
    assert tokenizer.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True) == \
        render_chat(msgs, TOOLS, add_generation_prompt=True)


def test_encode_episode_masks_assistant_tokens(tokenizer):
    msgs = episode()
    ids, mask = encode_episode(msgs, TOOLS, tokenizer)
    assert len(ids) == len(mask)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    # The stream decodes to the rendered chat, cut after the last assistant <|im_end|>.
    full = render_chat(msgs, TOOLS)
    assert tokenizer.decode(ids, skip_special_tokens=False) == full[: full.rfind("<|im_end|>") + len("<|im_end|>")]
    # Masked spans are exactly the assistant turns, each ending with <|im_end|>.
    spans, start = [], None
    for k, m in enumerate(mask + [0]):
        if m and start is None:
            start = k
        elif not m and start is not None:
            spans.append((start, k))
            start = None
    assistants = [m for m in msgs if m["role"] == "assistant"]
    assert len(spans) == len(assistants)
    for (a, b), msg in zip(spans, assistants):
        assert ids[b - 1] == end
        body = tokenizer.decode(ids[a:b - 1], skip_special_tokens=False)
        assert tokenizer.decode(ids[a - 3:a], skip_special_tokens=False) == "<|im_start|>assistant\n"
        parsed = parse_assistant_text(body)
        assert parsed.errors == [] and parsed.content == msg["content"].strip()
    # Every atomic id used in the episode is one token of the stream.
    tokens = tokenizer.convert_ids_to_tokens(ids)
    cut = full[: full.rfind("<|im_end|>")]
    for atom in ORDER_IDS + EMAILS:  # (not the zip: it is a substring of other ids)
        assert tokens.count(atom) == cut.count(atom)
    assert tokens.count(ORDER_IDS[0]) == 5
    # Encoding the full rendered text in one go gives the same ids (deltas are canonical here).
    assert ChatRenderer(tokenizer).encode(full[: full.rfind("<|im_end|>") + 10]) == ids


def test_compact_tools_style_lists_names_and_argument_types():
    from tests.model.tiny_domain import ATOMIC, make_corpus
    from trace_train.model import build_tokenizer, chat_template

    text = render_chat(episode()[:2], TOOLS, chat_template=chat_template("compact"))
    lines = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    got = [json.loads(line) for line in lines]
    assert [(g["name"], g["parameters"]) for g in got] == [
        ("get_order_details", {"order_id": "string"}),
        ("cancel_pending_order", {"order_id": "string", "reason": "string"}),
    ]
    assert len(text) < len(render_chat(episode()[:2], TOOLS))
    tok = build_tokenizer(make_corpus(20), ATOMIC, vocab_size=300, tools_style="compact")
    assert tok.apply_chat_template(episode()[:2], tools=TOOLS, tokenize=False) == text


def test_tools_style_none_never_renders_tools():
    from trace_train.model import chat_template

    msgs = episode()
    assert render_chat(msgs, TOOLS, chat_template=chat_template("none")) == render_chat(msgs, None)
    assert "<tools>" not in render_chat(msgs, TOOLS, chat_template=chat_template("none"))
