"""The one episode loop for scripted policies (``trace_envs.episode.play_scripted``): a reset/act
policy (the retail-sim expert) and a plain callable play through it, and the transcript comes from the
terminal ``info``, never from ``env.unwrapped``."""

from __future__ import annotations

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401  (registers the envs)
from trace_envs.episode import CallablePolicy, as_scripted, play_scripted
from trace_envs.records import RECORD_FIELD_KEYS, terminal_extras
from trace_envs.retail_sim import ScriptedExpert, run_episode


class NoUnwrapped(gym.Wrapper):
    """Fails the test if anything reaches behind the env's public API."""

    @property
    def unwrapped(self):
        raise AssertionError("the episode loop must not use env.unwrapped")


def _env():
    return NoUnwrapped(gym.make("trace/retail-sim-v0"))


def test_a_reset_act_policy_plays_and_the_transcript_travels_in_info():
    env = _env()
    result = play_scripted(env, ScriptedExpert(seed=0), seed=11)
    assert result.failure is None and result.terminated and result.reward == 1.0 and result.success
    transcript = result.info["transcript"]
    assert result.transcript == transcript and transcript[0]["role"] == "system"
    assert sum(m["role"] == "assistant" for m in transcript) == result.turns
    assert any(m.get("tool_calls") for m in transcript)  # the env's parsed messages, not raw action text
    assert result.termination == result.info["termination"] and "task" in result.reset_info
    again = play_scripted(env, ScriptedExpert(seed=0), seed=11)
    assert again.transcript == transcript  # deterministic from the seeds


def test_a_plain_callable_policy_plays_through_the_same_loop():
    seen = []

    def apologise(observation):
        seen.append(observation)
        return "I am sorry, I cannot help with that. ###STOP###"

    result = play_scripted(_env(), apologise, seed=3)
    assert len(seen) == result.turns == 1 and result.terminated and result.reward == 0.0
    assert result.transcript[-1] == {"role": "assistant", "content": "I am sorry, I cannot help with that. ###STOP###"}
    assert isinstance(as_scripted(apologise), CallablePolicy) and as_scripted(apologise).name == "function"
    expert = ScriptedExpert()
    assert as_scripted(expert) is expert
    with pytest.raises(TypeError, match="must be callable"):
        CallablePolicy(42)


def test_the_domain_runners_are_the_loop():
    reward, info, transcript = run_episode(gym.make("trace/retail-sim-v0"), ScriptedExpert(seed=0), 11)
    direct = play_scripted(gym.make("trace/retail-sim-v0"), ScriptedExpert(seed=0), 11)
    assert (reward, transcript) == (direct.reward, direct.transcript) and info["task"] == direct.reset_info["task"]


class Exploding(gym.Wrapper):
    def step(self, action):
        raise RuntimeError("the env broke")


def test_env_errors_are_caught_only_when_asked():
    env = Exploding(gym.make("trace/retail-sim-v0"))
    with pytest.raises(RuntimeError, match="the env broke"):
        play_scripted(env, ScriptedExpert(), seed=1)
    result = play_scripted(env, ScriptedExpert(), seed=1, catch_env_errors=True)
    assert result.failure is not None and result.failure.stage == "step" and result.failure.turn == 1
    assert result.transcript[0]["role"] == "system" and result.transcript[-1]["role"] == "assistant"
    assert result.reward == 0.0 and not result.success


def test_terminal_extras_drop_exactly_the_record_fields():
    result = play_scripted(gym.make("trace/retail-sim-v0"), ScriptedExpert(seed=0), seed=11)
    extras = terminal_extras(dict(result.info))
    assert not RECORD_FIELD_KEYS & set(extras)
    assert {"steps", "errors", "format_valid_fraction"} <= set(extras)
