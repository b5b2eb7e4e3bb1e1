import json

from trace_envs.core.parsing import (
    MAX_JSON_DEPTH,
    assistant_message,
    format_tool_call,
    parse_action,
    parse_assistant_text,
    scrub_surrogates,
)


def test_hermes_tool_call_and_text():
    text = 'Let me check.\n<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n</tool_call>'
    turn = parse_assistant_text(text)
    assert turn.format_ok
    assert turn.content == "Let me check."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("get_order_details", {"order_id": "#W1"})]


def test_bare_json_object_is_a_tool_call():
    turn = parse_assistant_text('{"name": "calculate", "arguments": {"expression": "1 + 2"}}')
    assert turn.tool_calls[0].name == "calculate" and turn.content == ""


def test_arguments_as_json_string_and_unclosed_tag():
    turn = parse_assistant_text('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}')
    assert turn.format_ok and turn.tool_calls[0].arguments == {"a": 1}


def test_malformed_calls_are_errors_not_exceptions():
    for text in ['<tool_call>{"name": </tool_call>', '<tool_call>[1,2]</tool_call>',
                 '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "f", "arguments": 3}</tool_call>']:
        turn = parse_assistant_text(text)
        assert not turn.format_ok and not turn.tool_calls, text


def test_plain_json_without_name_is_text():
    turn = parse_assistant_text('{"total": 3}')
    assert turn.content == '{"total": 3}' and not turn.tool_calls and turn.format_ok


def test_openai_message_dict_round_trip():
    call = format_tool_call("cancel_pending_order", {"order_id": "#W2", "reason": "no longer needed"})
    msg = assistant_message(parse_assistant_text(call))
    again = parse_action(msg)
    assert again.tool_calls[0].arguments == {"order_id": "#W2", "reason": "no longer needed"}
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"])["order_id"] == "#W2"


def test_non_text_actions_are_errors():
    assert not parse_action(42).format_ok
    assert not parse_action({"role": "assistant", "content": 5}).format_ok


# -- hostile output (issue 24): every decode path is guarded, nothing raises --------------------------
def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def _decode_paths(payload: str) -> list:
    """``payload`` as the arguments value in every path that decodes model-produced JSON."""
    return [
        f'<tool_call>{{"name": "f", "arguments": {{"x": {payload}}}}}</tool_call>',
        f'{{"name": "f", "arguments": {{"x": {payload}}}}}',
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "f", "arguments": f'{{"x": {payload}}}'}}]},
        {"role": "assistant", "content": f'<tool_call>{{"name": "f", "arguments": {{"x": {payload}}}}}</tool_call>'},
        '<tool_call>' + json.dumps({"name": "f", "arguments": f'{{"x": {payload}}}'}) + '</tool_call>',
    ]


def test_nesting_limit_is_exact_in_every_decode_path():
    # The call object and its arguments are 2 levels, so x may nest MAX_JSON_DEPTH - 2 lists.
    for action in _decode_paths(_nested(MAX_JSON_DEPTH - 2)):
        turn = parse_action(action)
        assert turn.format_ok and len(turn.tool_calls) == 1, action
    for levels in (MAX_JSON_DEPTH - 1, 999, 1000, 100_000):
        for action in _decode_paths(_nested(levels)):
            turn = parse_action(action)
            assert not turn.tool_calls and turn.errors == [turn.errors[0]], action
            assert f"nests deeper than {MAX_JSON_DEPTH} levels" in turn.errors[0]


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = '<tool_call>{"name": "f", "arguments": {"x": "' + "[{" * 500 + '\\"]"}}</tool_call>'
    turn = parse_assistant_text(text)
    assert turn.format_ok and turn.tool_calls[0].arguments == {"x": "[{" * 500 + '"]'}


def test_integer_literals_past_the_digit_limit_are_errors():
    for action in _decode_paths("9" * 5000) + _decode_paths("-" + "9" * 4301):
        turn = parse_action(action)
        assert not turn.tool_calls and "too many digits" in turn.errors[0], action
    assert parse_action({"name": "f", "arguments": {"x": 10 ** 5000}}).errors[0].endswith(
        "has an integer literal with too many digits (the limit is about 3,900)")
    assert parse_assistant_text('{"name": "f", "arguments": {"x": ' + "9" * 300 + "}}").tool_calls


def test_python_objects_that_are_not_json_are_errors():
    cyclic: dict = {"name": "f"}
    cyclic["arguments"] = cyclic
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    for action, message in [(cyclic, "nests deeper"), ({"name": "f", "arguments": {"x": deep}}, "nests deeper"),
                            ({"name": "f", "arguments": {"x": {1, 2}}}, "type set"),
                            ({"name": "f", "arguments": {"x": b"b"}}, "type bytes"),
                            ({"name": "f", "arguments": {(1, 2): 1}}, "non-string object key"),
                            ({"tool_calls": [{"id": 10 ** 5000, "function": {"name": "f"}}]}, "too many digits"),
                            ({"role": "user"}, "unsupported action")]:
        turn = parse_action(action)
        assert not turn.tool_calls and message in turn.errors[0], action
    assert "unsupported action type" in parse_action(["<tool_call>"]).errors[0]


def test_lone_surrogates_are_replaced_and_reported():
    assert scrub_surrogates("ok") == ("ok", 0)
    assert scrub_surrogates("a\ud800b\udc00") == ("a\ufffdb\ufffd", 2)
    assert scrub_surrogates("\ud83d\ude00") == ("\U0001f600", 0)  # a valid pair is joined, not an error
    escaped = parse_assistant_text('<tool_call>{"name": "f", "arguments": {"k\\udfff": "v\\ud800"}}</tool_call>')
    assert escaped.tool_calls[0].arguments == {"k\ufffd": "v\ufffd"}
    assert escaped.errors == ["the message contained 2 invalid Unicode character(s) (lone UTF-16 surrogates); "
                              "each was replaced with U+FFFD"]
    text = parse_assistant_text("hello \ud800 there")
    assert text.content == "hello \ufffd there" and len(text.errors) == 1 and not text.tool_calls
    message = parse_action({"role": "assistant", "content": "x\udc80",
                            "tool_calls": [{"function": {"name": "f\ud800", "arguments": {"a": ["\udbff"]}}}]})
    assert message.content == "x\ufffd" and message.tool_calls[0].name == "f\ufffd"
    assert message.tool_calls[0].arguments == {"a": ["\ufffd"]} and "3 invalid" in message.errors[0]
    for turn in (escaped, text, message):
        json.dumps(assistant_message(turn), ensure_ascii=False).encode("utf-8")
        json.dumps(turn.raw, ensure_ascii=False).encode("utf-8")
    paired = parse_assistant_text('<tool_call>{"name": "f", "arguments": {"e": "\\ud83d\\ude00"}}</tool_call>')
    assert paired.format_ok and paired.tool_calls[0].arguments == {"e": "\U0001f600"}


def test_broken_bare_call_is_an_error_but_json_like_text_stays_text():
    turn = parse_assistant_text('{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}")
    assert not turn.tool_calls and turn.errors and turn.content == ""
    assert parse_assistant_text("{not json}").content == "{not json}"
    assert parse_assistant_text('{"total": [1, 2}').content == '{"total": [1, 2}'


def test_a_close_tag_inside_a_json_string_does_not_end_the_block():
    code = 'PATTERN = "<tool_call>(.*?)</tool_call>"\n'
    call = format_tool_call("str_replace", {"path": "parser.py", "new_str": code})
    turn = parse_assistant_text(f"Editing.\n{call}\nthen\n{format_tool_call('f', {'a': 1})}")
    assert turn.format_ok and turn.content == "Editing.\n\nthen"
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("str_replace", {"path": "parser.py", "new_str": code}),
                                                               ("f", {"a": 1})]
    # a broken block still ends at its first close tag, and the block after it is read on its own
    broken = parse_assistant_text('<tool_call>{"name": </tool_call> mid <tool_call>{"name": "g", "arguments": {}}'
                                  "</tool_call>")
    assert [c.name for c in broken.tool_calls] == ["g"] and len(broken.errors) == 1 and broken.content == "mid"
    # many close tags in a broken block: only the first few are tried, the first one is taken
    hostile = parse_assistant_text("<tool_call>{" + "</tool_call>" * 10_000)
    assert not hostile.tool_calls and len(hostile.errors) == 1
