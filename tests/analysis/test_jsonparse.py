"""The tolerant JSON reader of LLM answers (``trace_train.analysis.jsonparse``), tested directly."""

import pytest

from trace_train.analysis.jsonparse import parse_json_loose


def test_fenced_answer_with_prose_around_it():
    text = 'Sure! Here it is:\n```json\n{"labels": ["a", "b"]}\n```\nHope this helps.'
    assert parse_json_loose(text) == {"labels": ["a", "b"]}


def test_trailing_commas_are_removed_outside_strings_only():
    assert parse_json_loose('{"a": [1, 2,], "b": "x,]",}') == {"a": [1, 2], "b": "x,]"}


def test_extra_text_after_a_complete_value_is_ignored():
    assert parse_json_loose('{"ok": true} and then some {"other": 1}') == {"ok": True}


def test_a_truncated_list_keeps_its_longest_complete_prefix():
    # the last complete member counts, the half-written key after it does not
    assert parse_json_loose('{"items": [{"id": 1}, {"id": 2}, {"id": 3, "na') == {
        "items": [{"id": 1}, {"id": 2}, {"id": 3}]}
    # a number cut off mid-way may be a different number: it is dropped
    assert parse_json_loose('[1, 2, 3, 4') == [1, 2, 3]


def test_brackets_and_escaped_quotes_inside_strings_do_not_confuse_the_repair():
    assert parse_json_loose('{"s": "a \\"}\\" [b", "t": [1,') == {"s": 'a "}" [b', "t": [1]}


def test_an_unterminated_fence_still_parses():
    assert parse_json_loose('```json\n{"x": 1}') == {"x": 1}


def test_no_json_is_a_value_error_and_non_text_a_type_error():
    with pytest.raises(ValueError, match="no JSON"):
        parse_json_loose("I cannot label this trajectory.")
    with pytest.raises(ValueError):
        parse_json_loose("{{{")
    with pytest.raises(TypeError, match="text"):
        parse_json_loose(None)  # type: ignore[arg-type]
