"""Retries, backoff, timeouts and bad answers: every failure ends in a clear RolloutServerError."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.rollout_openai.conftest import FAKE_ENV_ID
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.openai_backend import OpenAIRolloutBackend, RolloutServerError
from trace_train.rollout.openai_http import JSONHTTPClient, ServerError

SAMPLING = SamplingParams(max_new_tokens=4)
REQS = [EpisodeRequest(FAKE_ENV_ID, seed=0, sample_seed=1, env_kwargs={"turns": 2})]


def _fail_completions(plan):
    """Hook: the k-th completion request gets plan[k] (when present), others are served normally."""
    seen = []

    def hook(path, body, n):
        if path != "/v1/completions":
            return None
        seen.append(n)
        return plan[len(seen) - 1] if len(seen) <= len(plan) else None
    return hook


def _backend(urls, tokenizer, delays, **kw):
    kw.setdefault("backoff", 0.5)
    return OpenAIRolloutBackend(urls, "tiny", tokenizer, sleep=delays.append, **kw)


def test_500_and_429_are_retried_with_exponential_backoff(model, tokenizer):
    delays = []
    plan = [(500, "boom"), (429, json.dumps({"error": {"message": "slow down"}}))]
    with FakeOpenAIServer(model, tokenizer, hook=_fail_completions(plan)) as srv:
        (rec,) = _backend([srv.base_url], tokenizer, delays, retries=3).rollout(REQS, SAMPLING)
        n_completions = sum(p == "/v1/completions" for p in srv.paths())
    assert delays == [0.5, 1.0]
    assert n_completions == 2 + 2 and len(rec.info["turn_spans"]) == 2


def test_retries_exhausted_name_the_url_and_last_error(model, tokenizer):
    delays = []
    with FakeOpenAIServer(model, tokenizer, hook=_fail_completions([(503, "down")] * 9)) as srv:
        with pytest.raises(RolloutServerError) as err:
            _backend([srv.base_url], tokenizer, delays, retries=2).rollout(REQS, SAMPLING)
        assert sum(p == "/v1/completions" for p in srv.paths()) == 3
    assert f"{srv.base_url}/completions" in str(err.value) and "HTTP 503" in str(err.value)
    assert "after 3 attempts" in str(err.value) and err.value.url == f"{srv.base_url}/completions"
    assert delays == [0.5, 1.0]


def test_client_errors_are_not_retried(model, tokenizer):
    body = json.dumps({"error": {"message": "This model's maximum context length is 10"}})
    with FakeOpenAIServer(model, tokenizer, hook=_fail_completions([(400, body)])) as srv:
        with pytest.raises(RolloutServerError, match="HTTP 400: This model's maximum context length is 10"):
            _backend([srv.base_url], tokenizer, [], retries=3).rollout(REQS, SAMPLING)
        assert sum(p == "/v1/completions" for p in srv.paths()) == 1


def _answer_late(path, body, n):
    """Hook: every completion is answered (with an error, so no generation outlives the test) after 5 s."""
    if path == "/v1/completions":
        time.sleep(5.0)
        return 503, "late"
    return None


def test_timeout_is_a_clear_error(model, tokenizer):
    with FakeOpenAIServer(model, tokenizer, hook=_answer_late) as srv:
        backend = _backend([srv.base_url], tokenizer, [], retries=1, timeout=0.3)
        backend.check_server()
        start = time.monotonic()
        with pytest.raises(RolloutServerError, match="timed out") as err:
            backend.rollout(REQS, SAMPLING)
    assert time.monotonic() - start < 4.0  # gave up long before the 5 s answers (2 x 0.3 s)
    assert srv.base_url in str(err.value) and "after 2 attempts" in str(err.value)


def test_trickling_server_hits_the_total_deadline(model, tokenizer):
    from tests.analysis.llm_server import Trickle

    delays = []  # one byte every 0.2 s: no single read times out, only a total deadline ends it
    with FakeOpenAIServer(model, tokenizer, hook=_fail_completions([Trickle(interval_s=0.2)] * 2)) as srv:
        backend = _backend([srv.base_url], tokenizer, delays, retries=1, timeout=1.0)
        backend.check_server()
        start = time.monotonic()
        with pytest.raises(RolloutServerError, match=r"timed out: no complete response within the 1 s deadline"
                           ) as err:
            backend.rollout(REQS, SAMPLING)
        elapsed = time.monotonic() - start
        assert sum(p == "/v1/completions" for p in srv.paths()) == 2
    assert "after 2 attempts" in str(err.value) and f"{srv.base_url}/completions" in str(err.value)
    assert delays == [0.5] and elapsed < 10  # retried once per the policy, and it ended


def test_a_fast_trickle_within_the_deadline_is_read_whole():
    from tests.analysis.llm_server import FakeLLMServer, Trickle

    client = JSONHTTPClient(retries=0, timeout=30.0)
    with FakeLLMServer(lambda body, n: Trickle("x" * 50, interval_s=0.001)) as srv:
        payload = client.post(srv.base_url + "/chat/completions", {"a": 1})
    assert payload["choices"][0]["message"]["content"] == "x" * 50 and client.requests_made == 1


def test_unreachable_server(tokenizer):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    delays = []
    with pytest.raises(RolloutServerError, match=rf"127.0.0.1:{port}/v1/models.*after 2 attempts.*refused"):
        _backend([f"http://127.0.0.1:{port}/v1"], tokenizer, delays, retries=1).rollout(REQS, SAMPLING)
    assert delays == [0.5]


@pytest.mark.parametrize("answer, message", [
    ("not json{", "bad response"),
    (json.dumps({"choices": [{"index": 0, "text": "x", "logprobs": {"token_logprobs": [-1.0]}}]}),
     "return_token_ids"),
    (json.dumps({"choices": [{"index": 0, "text": "x", "token_ids": [5, 6], "logprobs": None}]}),
     "token_logprobs"),
    (json.dumps({"choices": [{"token_ids": [5, 6], "logprobs": {"token_logprobs": [-1.0, None]}}]}),
     "token_logprobs"),
    (json.dumps({"choices": []}), "no choices"),
    (json.dumps([1]), "no choices"),
    (json.dumps({"choices": ["x"]}), "first choice is a str"),
    (json.dumps({"choices": [None]}), "first choice is a NoneType"),
    (json.dumps({"choices": [{"token_ids": [5], "logprobs": [-1.0]}]}), "token_logprobs"),
    (json.dumps({"choices": [{"token_ids": [True, False], "logprobs": {"token_logprobs": [-1.0, -1.0]}}]}),
     "return_token_ids"),
    (json.dumps({"choices": [{"token_ids": [-3], "logprobs": {"token_logprobs": [-1.0]}}]}), "return_token_ids"),
    ('{"choices": [{"token_ids": [5], "logprobs": {"token_logprobs": [NaN]}}]}', "finite log-prob"),
    (json.dumps({"choices": [{"token_ids": [5], "logprobs": {"token_logprobs": [3.0]}}]}), "finite log-prob"),
])
def test_bad_answers_fail_at_once(model, tokenizer, answer, message):
    with FakeOpenAIServer(model, tokenizer, hook=_fail_completions([(200, answer)])) as srv:
        with pytest.raises(RolloutServerError, match=message) as err:
            _backend([srv.base_url], tokenizer, [], retries=3).rollout(REQS, SAMPLING)
        assert sum(p == "/v1/completions" for p in srv.paths()) == 1  # a broken server is not retried
    assert srv.base_url in str(err.value)


def test_changed_prompt_or_overlong_answer_is_rejected(model, tokenizer):
    def echo_other_prompt(path, body, n):
        if path == "/v1/completions":
            return 200, json.dumps({"choices": [{"token_ids": [5], "prompt_token_ids": body["prompt"][1:],
                                                 "logprobs": {"token_logprobs": [-1.0]}}]})
    with FakeOpenAIServer(model, tokenizer, hook=echo_other_prompt) as srv:
        with pytest.raises(RolloutServerError, match="changed the token-id prompt"):
            _backend([srv.base_url], tokenizer, []).rollout(REQS, SAMPLING)

    def too_long(path, body, n):
        if path == "/v1/completions":
            k = body["max_tokens"] + 1
            return 200, json.dumps({"choices": [{"token_ids": [5] * k, "logprobs": {"token_logprobs": [-1.0] * k}}]})
    with FakeOpenAIServer(model, tokenizer, hook=too_long) as srv:
        with pytest.raises(RolloutServerError, match="max_tokens=4"):
            _backend([srv.base_url], tokenizer, []).rollout(REQS, SAMPLING)


def test_shared_client_backoff_is_capped():
    from tests.analysis.llm_server import FakeLLMServer

    delays = []
    client = JSONHTTPClient(retries=3, backoff_s=1.0, max_backoff_s=3.0, sleep=delays.append)
    with FakeLLMServer(lambda body, n: (503, "x")) as srv:
        with pytest.raises(ServerError, match="after 4 attempts"):
            client.post(srv.base_url + "/chat/completions", {"a": 1})
    assert delays == [1.0, 2.0, 3.0] and client.requests_made == 4
