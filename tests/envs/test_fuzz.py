"""Seeded fuzz (``trace_envs.core.fuzz``, shared with benchmarks/fuzz_envs.py): hostile actions never
raise out of ``step``/``reset``, observations stay in the spaces, episodes respect ``max_steps``, and
every transcript stays writable as UTF-8 JSON. The >= 10,000-actions-per-env figure is the benchmark's."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import trace_envs  # noqa: F401
from tests.tau2.conftest import requires_tau2
from trace_envs.core.fuzz import FUZZ_KINDS, ActionFuzzer, fuzz_env
from trace_envs.core.spaces import MessageList, MessageText

TAU2 = [pytest.mark.tau2, requires_tau2]
LOCAL_ENVS = ["trace/retail-sim-v0", "trace/precondition_verification-v0", "trace/structured_data_reasoning-v0",
              "trace/multi_step_task_completion-v0", "trace/tool_calling_precision-v0"]


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_fuzzed_actions_never_escape(env_id):
    env = gym.make(env_id, max_steps=10)
    report = fuzz_env(env, n_actions=600, seed=11)
    assert report.actions == 600 and report.episodes > 60
    assert report.clean, report.failures
    assert set(report.kinds) == set(FUZZ_KINDS)  # every kind of hostile action was tried


@pytest.mark.parametrize("env_id", [pytest.param("trace/tau2-airline-v0", marks=TAU2),
                                    pytest.param("trace/tau2-retail-v0", marks=TAU2)])
def test_fuzzed_actions_never_escape_tau2(env_id):
    report = fuzz_env(gym.make(env_id, max_steps=10), n_actions=40, seed=12)
    assert report.actions == 40 and report.clean, report.failures


class NaiveEnv(gym.Env):
    """What the fuzzer must catch: an unguarded ``json.loads`` and raw text kept in the transcript."""

    def __init__(self):
        self.action_space, self.observation_space = MessageText(), MessageList()
        self.transcript: list = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.transcript = []
        return [{"role": "user", "content": "hi"}], {"tools": []}

    def step(self, action):
        if isinstance(action, str) and "<tool_call>" in action:
            try:
                json.loads(action.split("<tool_call>", 1)[1].split("</tool_call>")[0])
            except json.JSONDecodeError:
                pass
        self.transcript.append({"role": "assistant", "content": action if isinstance(action, str) else ""})
        return [{"role": "user", "content": "ok"}], 0.0, False, len(self.transcript) >= 5, {}


def test_fuzzer_finds_the_bugs_of_a_naive_env():
    report = fuzz_env(NaiveEnv(), n_actions=400, seed=0)
    assert report.escaped > 0 and report.unwritable_transcripts > 0
    assert {f.error.split(":")[0] for f in report.failures if f.stage == "step"} >= {"RecursionError", "ValueError"}


def test_fuzzer_is_seeded():
    def draws(seed):
        fuzzer = ActionFuzzer(np.random.default_rng(seed))
        fuzzer.start([{"role": "user", "content": "order #W1234567 for jane@x.com"}],
                     gym.make("trace/retail-sim-v0").reset(seed=0)[1])
        return [(kind, action if isinstance(action, str) else type(action).__name__)
                for kind, action in (fuzzer.draw() for _ in range(300))]

    assert draws(5) == draws(5) and draws(5) != draws(6)
