"""A τ² transcript tau2's replay would refuse: agent-chosen call ids equal to the env's own, and any transcript
whose replay fails, end the episode with a reward, never an exception from ``step()``."""

from __future__ import annotations

import logging

import pytest

from tests.tau2.conftest import requires_tau2
from trace_envs.tau2.env import Tau2Env
from trace_envs.tau2.evaluation import evaluate_transcript

pytestmark = [pytest.mark.tau2, requires_tau2]

CHOSEN = ('<tool_call>{"id": "call_1", "function": {"name": "calculate", "arguments": {"expression": "1+1"}}}'
          "</tool_call>")
MALFORMED = '<tool_call>{"name": "calculate", "arguments": </tool_call>'


def test_agent_chosen_id_equal_to_an_env_id_is_scored_like_any_other():
    env = Tau2Env(domain="airline")
    results = []
    for turn in (CHOSEN + "\n" + MALFORMED, CHOSEN.replace('"id": "call_1", ', "") + "\n" + MALFORMED):
        env.reset(seed=0)
        obs, *_ = env.step(turn)
        assert len({m["tool_call_id"] for m in obs}) == 2
        assert [m["content"] for m in obs if m["name"] == "calculate"] == ["2.0"]
        _, reward, terminated, _, info = env.step("Done. ###STOP###")
        assert terminated and "scoring_error" not in info
        results.append((reward, info["reward_breakdown"]))
    assert results[0] == results[1]


def test_a_transcript_tau2_cannot_replay_scores_zero_with_a_note(caplog):
    env = Tau2Env(domain="airline")
    env.reset(seed=0)
    transcript = env.transcript + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calculate", "arguments": '{"expression": "1+1"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "calculate", "content": "3.0"},  # replay gives 2.0
        {"role": "assistant", "content": "Done. ###STOP###"},
    ]
    episode = env.episode
    with caplog.at_level(logging.WARNING, logger="trace_envs.tau2.evaluation"):
        score = evaluate_transcript(episode.task, "airline", transcript, "agent_stop", "run-x")
    assert (score.reward, score.success, score.breakdown) == (0.0, False, {})
    assert score.info["scoring_error"].startswith("ValueError: Tool call:")
    assert "run-x cannot be scored, reward 0" in caplog.text
