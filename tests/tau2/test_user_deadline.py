"""The τ² LLM user's HTTP call: a total deadline per request and clear endpoint errors."""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from tests.analysis.llm_server import FakeLLMServer, Hang, Trickle
from tests.tau2.conftest import requires_tau2

pytestmark = [pytest.mark.tau2, requires_tau2]


def _reset(srv: FakeLLMServer, timeout_s: float = 1.0, retries: int = 0):
    env = gym.make("trace/tau2-retail-llm-v0",
                   user_config={"base_url": srv.base_url, "model": "u", "timeout_s": timeout_s, "retries": retries})
    return env.reset(seed=0, options={"task_id": "3"})


def test_trickling_user_endpoint_hits_the_total_deadline():
    # one byte every 0.2 s: each read succeeds, so only a deadline on the whole request ends it
    with FakeLLMServer(lambda body, n: Trickle("I want to cancel my order.", interval_s=0.2)) as srv:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"timed out: no complete response within the 1 s deadline") as err:
            _reset(srv)
        elapsed = time.monotonic() - start
    assert srv.base_url in str(err.value) and len(srv.requests) == 1
    assert elapsed < 10


def test_hanging_user_endpoint_times_out_and_http_errors_are_named():
    with FakeLLMServer(lambda body, n: Hang(60)) as srv, pytest.raises(RuntimeError, match="timed out"):
        _reset(srv, timeout_s=0.5)
    with FakeLLMServer(lambda body, n: (500, "overloaded")) as srv:
        with pytest.raises(RuntimeError, match=r"HTTP 500: overloaded") as err:
            _reset(srv)
    assert srv.base_url in str(err.value)
    with FakeLLMServer(lambda body, n: (200, "<html>not json")) as srv:
        with pytest.raises(RuntimeError, match="bad response .*JSONDecodeError"):
            _reset(srv)


def test_user_endpoint_errors_are_retried_by_the_shared_client():
    # the τ² user goes through trace_envs.llm_http.JSONHTTPClient: a 503 and a body without a message are
    # retried, and the third answer is used
    replies = [(503, "busy"), (200, '{"choices": []}')]

    def answer(body, n):
        return replies[n] if n < len(replies) else "I want to cancel my order."

    with FakeLLMServer(answer) as srv:
        env = gym.make("trace/tau2-retail-llm-v0", user_config={
            "base_url": srv.base_url, "model": "u", "timeout_s": 5, "retries": 2})
        obs, _ = env.reset(seed=0, options={"task_id": "3"})
    assert len(srv.requests) == 3
    assert obs[1] == {"role": "user", "content": "I want to cancel my order."}


def test_a_slow_but_timely_user_answer_is_read_whole():
    with FakeLLMServer(lambda body, n: Trickle("I want to cancel my order.", interval_s=0.001)) as srv:
        obs, _ = _reset(srv, timeout_s=30)
    assert obs[1] == {"role": "user", "content": "I want to cancel my order."}
