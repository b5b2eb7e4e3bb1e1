"""The LLM labeler against a local OpenAI-compatible server: format, parsing, retries, caching."""

from __future__ import annotations

import json

import pytest

from tests.analysis.llm_server import FakeLLMServer, aliases_in, capabilities_in, prompt_of
from trace_train.analysis.aggregate import Thresholds, aggregate
from trace_train.analysis.labels import Capability, Label
from trace_train.analysis.llm_client import ChatClient, LLMError
from trace_train.analysis.llm_labeler import LLMLabeler
from trace_train.trajectory import TrajectoryRecord

CAPS = [Capability("cap_a", "fails when lacking"), Capability("cap_b", "never matters")]


def records(n: int = 6) -> list[TrajectoryRecord]:
    return [
        TrajectoryRecord(env_id="test/x-v0", seed=i, reward=float(i % 2), success=bool(i % 2), termination="user_stop",
                         messages=[{"role": "user", "content": f"request {i}"},
                                   {"role": "assistant", "content": f"answer {i}"}])
        for i in range(n)
    ]


def judge(prompt: str) -> dict[str, dict[str, str]]:
    """A deterministic 'model': cap_a LACKING on failures, PRESENT on successes; cap_b NA."""
    caps = capabilities_in(prompt)
    return {a: {c: ("PRESENT" if ok else "LACKING") if c == "cap_a" else "NA" for c in caps}
            for a, ok in aliases_in(prompt)}


def good(body, n):
    return json.dumps({"labels": judge(prompt_of(body))})


def client(server: FakeLLMServer, tmp_path, **kw) -> ChatClient:
    return ChatClient(base_url=server.base_url, model="tiny-judge", api_key="sk-test", temperature=0.5,
                      max_tokens=321, timeout=5, retries=kw.pop("retries", 2), backoff_s=0.0,
                      cache_dir=tmp_path / "cache", **kw)


def test_request_format_and_well_formed_answer(tmp_path):
    recs = records(6)
    with FakeLLMServer(good) as srv:
        runs = LLMLabeler(client(srv, tmp_path), batch_size=4).label(recs, CAPS, n_runs=2)
    assert srv.paths == ["/v1/chat/completions"] * 4                    # 2 runs x 2 batches
    body = srv.requests[0]
    assert body["model"] == "tiny-judge" and body["temperature"] == 0.5 and body["max_tokens"] == 321
    assert body["messages"][0]["role"] == "user" and "cap_a" in body["messages"][0]["content"]
    assert srv.headers[0]["Authorization"] == "Bearer sk-test"
    assert srv.requests[0]["seed"] != srv.requests[2]["seed"]             # runs differ by seed
    assert len({json.dumps(r, sort_keys=True) for r in srv.requests}) == 4
    assert [a for a, _ in aliases_in(prompt_of(srv.requests[1]))] == ["t5", "t6"]
    for run in runs:
        assert not run.missing
        for r in recs:
            assert run[(r.episode_id, "cap_a")] is (Label.PRESENT if r.success else Label.LACKING)
            assert run[(r.episode_id, "cap_b")] is Label.NA
    res = aggregate(runs, CAPS, {r.episode_id: r.success for r in recs}, Thresholds(k=2))
    assert [c.name for c in res.selected] == ["cap_a"]


def test_malformed_answers_are_parsed(tmp_path):
    def fenced(body, n):
        labels = judge(prompt_of(body))
        if n == 0:  # code fence, prose, trailing commas, lower-case labels
            inner = ",\n".join(f'"{a}": {{' + ", ".join(f'"{c}": "{v.lower()}"' for c, v in d.items()) + ",}"
                               for a, d in labels.items())
            return "Here you go:\n```json\n{\"labels\": {" + inner + ",}}\n```\nDone."
        # list-of-triples shape
        return json.dumps({"labels": [{"trajectory_id": a, "capability": c, "label": v}
                                      for a, d in labels.items() for c, v in d.items()]})

    with FakeLLMServer(fenced) as srv:
        runs = LLMLabeler(client(srv, tmp_path), batch_size=10).label(records(4), CAPS, n_runs=2)
    assert len(srv.requests) == 2
    assert all(len(r) == 8 and not r.missing for r in runs)


def test_partial_answer_is_retried_for_the_missing_trajectories_only(tmp_path):
    def truncated_first(body, n):
        text = json.dumps({"labels": judge(prompt_of(body))})
        return text[: len(text) // 2] if n == 0 else text  # cut mid-list on the first request

    recs = records(6)
    with FakeLLMServer(truncated_first) as srv:
        run = LLMLabeler(client(srv, tmp_path), batch_size=6, label_retries=2).label_run(recs, CAPS, 0)
    assert len(srv.requests) == 2
    first, second = ({a for a, _ in aliases_in(prompt_of(b))} for b in srv.requests)
    assert first == {f"t{i}" for i in range(1, 7)} and second < first and second
    assert srv.requests[0]["seed"] != srv.requests[1]["seed"]
    assert len(run) == 12 and not run.missing


def test_garbage_is_retried_then_reported_missing_not_na(tmp_path):
    recs = records(4)
    with FakeLLMServer(lambda body, n: "I cannot help with that.") as srv:  # coverage check off: see test_llm_faults
        run = LLMLabeler(client(srv, tmp_path), batch_size=4, label_retries=2,
                         min_labeled_fraction=0.0).label_run(recs, CAPS, 0)
    assert len(srv.requests) == 3                                        # 1 + 2 retries, then give up
    assert len(run) == 0 and len(run.missing) == 8
    res = aggregate([run], CAPS, {r.episode_id: r.success for r in recs}, Thresholds(k=1))
    assert res.missing_pairs == 8
    assert all(s.na_failed == 0 and s.na_passed == 0 for c in res.candidates for s in c.runs)


def test_http_errors_are_retried_and_then_raise(tmp_path):
    with FakeLLMServer(lambda body, n: (500, "boom") if n == 0 else good(body, n)) as srv:
        run = LLMLabeler(client(srv, tmp_path), batch_size=4).label_run(records(2), CAPS, 0)
    assert len(srv.requests) == 2 and len(run) == 4
    with FakeLLMServer(lambda body, n: (503, "down")) as srv, pytest.raises(LLMError):
        LLMLabeler(client(srv, tmp_path / "other", retries=1)).label_run(records(2), CAPS, 0)
    assert len(srv.requests) == 2
    with FakeLLMServer(lambda body, n: (401, "no")) as srv, pytest.raises(LLMError):  # 4xx: no retry
        LLMLabeler(client(srv, tmp_path / "third")).label_run(records(2), CAPS, 0)
    assert len(srv.requests) == 1


def test_cache_makes_a_rerun_free(tmp_path):
    recs = records(6)
    with FakeLLMServer(good) as srv:
        first = LLMLabeler(client(srv, tmp_path), batch_size=4).label(recs, CAPS, n_runs=3)
        made = len(srv.requests)
        c2 = client(srv, tmp_path)
        again = LLMLabeler(c2, batch_size=4).label(recs, CAPS, n_runs=3)
    assert made == 6 and len(srv.requests) == made                       # second run: zero requests
    assert c2.requests_made == 0 and c2.cache_hits == 6
    assert [r.labels for r in first] == [r.labels for r in again]
    assert len(list((tmp_path / "cache").glob("*.json"))) == 6


def test_discovery(tmp_path):
    def propose(body, n):
        prompt = prompt_of(body)
        assert "at most 3 capabilities" in prompt and "### t1" in prompt
        cands = [{"name": "Precondition Checking", "description": "Checks rules before acting.",
                  "example_trajectories": [{"id": "t1", "note": "acted anyway"}]},
                 {"name": "precondition_checking", "description": "duplicate"},
                 {"name": "numeric-reasoning", "description": "Adds numbers right."},
                 {"name": "a", "description": "b"}, {"name": "c", "description": "d"}]
        return "```json\n" + json.dumps({"candidates": cands}) + "\n```"

    with FakeLLMServer(propose) as srv:
        caps = LLMLabeler(client(srv, tmp_path)).discover(records(4), max_candidates=3)
    assert [c.name for c in caps] == ["precondition_checking", "numeric_reasoning", "a"]
    assert caps[0].description == "Checks rules before acting."
    assert len(srv.requests) == 1


def test_load_capabilities_reads_both_shapes(tmp_path):
    from trace_train.analysis.llm_labeler import load_capabilities

    entries = [{"name": "Tool Calling", "description": "calls tools"}, {"name": "b", "description": "d"}]
    for value in ({"candidates": entries}, entries):
        (tmp_path / "caps.json").write_text(json.dumps(value))
        caps = load_capabilities(tmp_path / "caps.json")
        assert [(c.name, c.description) for c in caps] == [("tool_calling", "calls tools"), ("b", "d")]


@pytest.mark.parametrize("text,says", [
    ('{"candidates": [{"name": "a", "desc', "cannot read it as JSON"),
    ("", "cannot read it as JSON"),
    ('{"candidates": "a"}', "holds no list"),
    ('{"candidates": []}', "holds no list"),
    ('{"name": "a", "description": "x"}', "holds no list"),
    ('{"candidates": [{"name": "a"}]}', "entry 0: needs a string name and a string description"),
    ('[{"name": "a", "description": "x"}, "b"]', "entry 1: needs a string name"),
    ('[{"name": 3, "description": "x"}]', "entry 0: needs a string name"),
    ('{"candidates": [{"name": "!!!", "description": "x"}]}', "entry 0: name '!!!' is empty in snake_case"),
    ('{"candidates": [{"name": "Tool Calling", "description": "a"}, {"name": "tool_calling", "description": "b"}]}',
     "entry 1: name 'tool_calling' is 'tool_calling' in snake_case, as is entry 0's"),
    ('[{"name": "a", "description": "x"}, {"name": "a", "description": "y"}]', "entry 1: name 'a'"),
])
def test_a_damaged_or_ill_shaped_capabilities_file_names_the_file_and_entry(tmp_path, text, says):
    from trace_train.analysis.llm_labeler import load_capabilities

    path = tmp_path / "caps.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_capabilities(path)
    message = str(info.value)
    assert message.startswith(f"capabilities file {path}") and says in message and "\n" not in message


def test_a_missing_capabilities_file_is_a_value_error_naming_it(tmp_path):
    from trace_train.analysis.llm_labeler import load_capabilities

    with pytest.raises(ValueError, match="capabilities file .*missing.json: cannot read"):
        load_capabilities(tmp_path / "missing.json")
