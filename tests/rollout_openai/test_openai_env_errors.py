"""openai backend: an env that raises ends only its own episode (``env_error``); the batch goes on."""

from __future__ import annotations

import logging

from tests.rollout.test_env_errors import (
    GREEDY,
    assert_same_records,
    check_failed_records,
    failing_factory,
    normal_requests,
    with_failures,
)
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_train.rollout.base import ENV_ERROR
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.openai_backend import OpenAIRolloutBackend


def test_openai_env_error_ends_only_that_episode(model, tokenizer, tmp_path, caplog):
    normal = normal_requests()
    with FakeOpenAIServer(model, tokenizer) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer, env_factory=failing_factory)
        baseline = backend.rollout(normal, GREEDY)
        with caplog.at_level(logging.WARNING, logger="trace_train.rollout.hf"):
            records = backend.rollout(with_failures(normal), GREEDY)
        failing_user = "fake/tool-v0|7|5"
        failing_calls = [b for p, b in srv.log if p == "/v1/completions" and b["user"] == failing_user]
    assert len(records) == 6
    check_failed_records(records, tmp_path)
    assert_same_records([records[i] for i in (0, 2, 4, 5)], baseline)
    assert len(failing_calls) == 2  # no request after its env failed on step 2
    assert backend.router.live == [0]  # the failed episodes gave their server slot back
    assert sum("EnvCrash" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING) == 2
    # Same records as the hf backend, failures included.
    hf = HFRolloutBackend(model, tokenizer, policy_name="openai", env_factory=failing_factory)
    assert_same_records(records, hf.rollout(with_failures(normal), GREEDY))
    assert records[1].termination == ENV_ERROR
