"""Faulty LLM endpoints: total deadlines, loud coverage failures, a cache of validated answers only."""

from __future__ import annotations

import json
import time

import pytest
from hydra import compose, initialize_config_dir

from tests.analysis.llm_server import FakeLLMServer, Trickle, prompt_of
from tests.analysis.test_llm_labeler import CAPS, client, good, judge, records
from trace_train.analysis.llm_client import ChatClient, LLMError
from trace_train.analysis.llm_labeler import LabelCoverageError, LLMLabeler
from trace_train.analysis.run import run_analysis
from trace_train.paths import CONF_DIR


def nonsense(body, n):
    """Valid JSON in the expected shape, but every label is a word the labeler does not know."""
    return json.dumps({"labels": {a: {c: "banana" for c in caps} for a, caps in judge(prompt_of(body)).items()}})


def test_trickling_server_hits_the_total_deadline_then_is_retried_then_reported(tmp_path):
    # one byte every 0.2 s: every single read succeeds, only a total deadline can stop it
    with FakeLLMServer(lambda body, n: Trickle(good(body, n), interval_s=0.2)) as srv:
        c = ChatClient(base_url=srv.base_url, model="m", timeout=1.0, retries=1, backoff_s=0.0)
        start = time.monotonic()
        with pytest.raises(LLMError) as err:
            c.complete([{"role": "user", "content": "hi"}])
        elapsed = time.monotonic() - start
    assert "timed out" in str(err.value) and "1 s deadline" in str(err.value)
    assert "after 2 attempts" in str(err.value) and srv.base_url in str(err.value)
    assert len(srv.requests) == 2 and c.requests_made == 2            # retried once, per the policy
    assert elapsed < 10                                                # ended (a trickle of ~300 B takes 60 s)


def test_nonsense_labels_fail_the_run_with_counts(tmp_path):
    with FakeLLMServer(nonsense) as srv:
        labeler = LLMLabeler(client(srv, tmp_path), batch_size=4, label_retries=1, min_labeled_fraction=0.9)
        with pytest.raises(LabelCoverageError) as err:
            labeler.label(records(6), CAPS, n_runs=2)
    e = err.value
    assert (e.labelled, e.unlabelled, e.total) == (0, 12, 12) and e.run == 0
    assert len(srv.requests) == 4                                      # 2 batches x (1 + 1 retry), then stop
    text = str(e)
    assert "0 of 12" in text and "12 unlabelled" in text and "90%" in text
    assert "'banana'" in text and "invalid label" in text             # why
    assert str(tmp_path / "cache") in text                             # where the answers are cached


def test_coverage_at_or_above_the_minimum_passes_and_records_missing(tmp_path):
    def half(body, n):  # labels only cap_a: 50% of the pairs
        return json.dumps({"labels": {a: {"cap_a": v["cap_a"]} for a, v in judge(prompt_of(body)).items()}})

    with FakeLLMServer(half) as srv:
        run = LLMLabeler(client(srv, tmp_path), batch_size=4, label_retries=0,
                         min_labeled_fraction=0.5).label_run(records(4), CAPS, 0)
        with pytest.raises(LabelCoverageError, match=r"4 of 8 .* 4 unlabelled"):
            LLMLabeler(client(srv, tmp_path), batch_size=4, label_retries=0,
                       min_labeled_fraction=0.51).label_run(records(4), CAPS, 0)
    assert len(run) == 4 and len(run.missing) == 4


def test_nonsense_labels_fail_the_configured_analysis(tmp_path):
    with FakeLLMServer(nonsense) as srv, initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("analyze", overrides=[
            "trajectories=unused", "labeler=llm", f"out={tmp_path / 'out'}",
            f"analysis.llm.base_url={srv.base_url}", f"analysis.llm.cache_dir={tmp_path / 'cache'}",
            f"analysis.llm.capabilities_file={_caps_file(tmp_path)}", "analysis.llm.retries=0",
            "analysis.llm.label_retries=0", "analysis.n_runs=2", "analysis.k=2"])
        assert cfg.analysis.llm.min_labeled_fraction == 0.9            # the documented default
        with pytest.raises(LabelCoverageError, match="0 of 12"):
            run_analysis(records(6), cfg.analysis, cfg.labeler, cfg.out)
    assert not (tmp_path / "out" / "selected_capabilities.json").exists()


def _caps_file(tmp_path):
    path = tmp_path / "caps.json"
    path.write_text(json.dumps({"candidates": [c.to_dict() for c in CAPS]}))
    return path


def test_bad_answers_are_not_cached_so_a_fixed_server_is_asked_again(tmp_path):
    state = {"fixed": False}
    with FakeLLMServer(lambda body, n: good(body, n) if state["fixed"] else nonsense(body, n)) as srv:
        with pytest.raises(LabelCoverageError):
            LLMLabeler(client(srv, tmp_path), batch_size=4).label_run(records(4), CAPS, 0)
        assert not list((tmp_path / "cache").glob("*.json"))             # nothing validated, nothing stored
        bad_requests = len(srv.requests)
        state["fixed"] = True
        c2 = client(srv, tmp_path)
        run = LLMLabeler(c2, batch_size=4).label_run(records(4), CAPS, 0)
    assert c2.requests_made == 1 and len(srv.requests) == bad_requests + 1
    assert len(run) == 8 and not run.missing
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1


def test_the_cache_key_includes_the_endpoint(tmp_path):
    msgs = [{"role": "user", "content": "same prompt"}]
    with FakeLLMServer(lambda b, n: "from A") as a, FakeLLMServer(lambda b, n: "from B") as b:
        ca, cb = client(a, tmp_path), client(b, tmp_path)
        assert ca.complete(msgs) == "from A" and cb.complete(msgs) == "from B"
        assert client(a, tmp_path).complete(msgs) == "from A"          # each endpoint keeps its own answer
    assert len(a.requests) == 1 and len(b.requests) == 1
    entries = [json.loads(p.read_text()) for p in (tmp_path / "cache").glob("*.json")]
    assert sorted(e["endpoint"] for e in entries) == sorted([a.base_url, b.base_url])


@pytest.mark.parametrize("raw", [b"\xff\xfe\x00garbage", b'["a", "list"]', b'{"content": "trunc', b'{"content": 7}',
                                 b""], ids=["non-utf8", "not-an-object", "truncated", "content-not-text", "empty"])
def test_a_corrupt_cache_entry_is_asked_again(tmp_path, raw, caplog):
    msgs = [{"role": "user", "content": "q"}]
    with FakeLLMServer(lambda b, n: f"answer {n}") as srv:
        first = client(srv, tmp_path)
        assert first.complete(msgs) == "answer 0"
        (entry,) = (tmp_path / "cache").glob("*.json")
        entry.write_bytes(raw)
        again = client(srv, tmp_path)
        assert again.complete(msgs) == "answer 1"                      # re-asked, no exception
        assert client(srv, tmp_path).complete(msgs) == "answer 1"      # and the entry was repaired
    assert again.requests_made == 1 and len(srv.requests) == 2
    assert any("corrupt cache entry" in r.getMessage() and str(entry) in r.getMessage() for r in caplog.records)


def test_endpoint_errors_name_the_cache(tmp_path):
    with FakeLLMServer(lambda b, n: (503, "down")) as srv, pytest.raises(LLMError) as err:
        client(srv, tmp_path, retries=0).complete([{"role": "user", "content": "q"}])
    assert "HTTP 503" in str(err.value) and str(tmp_path / "cache") in str(err.value)
