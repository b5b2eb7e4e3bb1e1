"""An LLM answer whose first JSON value is not the answer (a bracket in prose, a quoted tool call in its reasoning,
a repeated format example) is still read: the labeler takes the first JSON value that holds labels / candidates."""

from __future__ import annotations

import json

from tests.analysis.llm_server import FakeLLMServer, aliases_in, capabilities_in, prompt_of
from tests.analysis.test_llm_labeler import CAPS, client, records
from trace_train.analysis.jsonparse import parse_json_loose
from trace_train.analysis.llm_labeler import LLMLabeler


def test_a_bracket_in_prose_before_the_answer_does_not_hide_it():
    assert parse_json_loose('see [t1]: {"t1": {"c": "NA"}}') == {"t1": {"c": "NA"}}


def test_every_json_value_is_a_candidate_in_order_nested_ones_not_again():
    from trace_train.analysis.jsonparse import json_candidates

    text = ('<think>t1 called {"name": "cancel", "arguments": {"id": 1}}</think>\n'
            '```json\n{"labels": {"t1": {"x": "NA"}}}\n```\nAnswer: {"t1": {"c": "PRESENT"}}')
    assert list(json_candidates(text)) == [
        {"labels": {"t1": {"x": "NA"}}},  # the fence first
        {"name": "cancel", "arguments": {"id": 1}}, {"labels": {"t1": {"x": "NA"}}}, {"t1": {"c": "PRESENT"}}]
    assert parse_json_loose(text) == {"labels": {"t1": {"x": "NA"}}}  # the first candidate, as before


def test_reasoning_that_quotes_a_tool_call_still_labels_every_pair(tmp_path):
    def answer(body, n):
        prompt = prompt_of(body)
        labels = {a: {c: "PRESENT" for c in capabilities_in(prompt)} for a, _ in aliases_in(prompt)}
        return ('<think>t1 called {"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}} first</think>\n'
                + json.dumps({"labels": labels}))

    with FakeLLMServer(answer) as srv:
        run = LLMLabeler(client(srv, tmp_path), batch_size=8, label_retries=0).label_run(records(4), CAPS, 0)
    assert len(run) == 4 * len(CAPS)
    assert len(srv.requests) == 1


def test_discovery_skips_a_repeated_format_example(tmp_path):
    cands = [{"name": "precondition_checking", "description": "Checks rules before acting."}]

    def answer(body, n):
        return ('The format is {"name": "<snake_case>", "description": "<one line>"}.\n'
                + json.dumps({"candidates": cands}))

    with FakeLLMServer(answer) as srv:
        caps = LLMLabeler(client(srv, tmp_path)).discover(records(4), max_candidates=3)
    assert [c.name for c in caps] == ["precondition_checking"]
    assert len(srv.requests) == 1


def test_the_lenient_repairs_run_once_per_segment_not_at_every_bracket(monkeypatch):
    """An answer of many unclosed braces: repairing a truncated value at each of them re-scanned the rest of the text
    each time (13,000 characters took over 100 s); the repairs run at a segment's first bracket only."""
    from trace_train.analysis import jsonparse

    calls = []
    real = jsonparse._close_truncated
    monkeypatch.setattr(jsonparse, "_close_truncated", lambda body: calls.append(len(body)) or real(body))
    answer = "The agent called {get_order_details, with order_id, then cancel, " * 300
    assert list(jsonparse.json_candidates(answer)) == []
    assert len(calls) == 1
    assert jsonparse.parse_json_loose('see [t1]: {"t1": {"c": "NA"}}') == {"t1": {"c": "NA"}}
