import json

from trace_envs.core.parsing import assistant_message, format_tool_call, parse_action, parse_assistant_text


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
