"""τ² envs and the τ² labeler on what agents actually do: call a tool named like the env's own error messages,
list items in another order, state a total without the order id or after listing the parts; the multi-step
family's gold as a whole; kwargs checked when the env is made."""

from __future__ import annotations

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
import trace_envs.tau2.env as tau2_env
import trace_train.analysis.tau2_labeler  # noqa: F401  (registers the τ² probes)
from trace_envs.core.parsing import format_tool_call
from trace_envs.tau2.policies import gold_turns, run_episode
from trace_envs.tau2.runtime import tau2_available
from trace_envs.tau2.tasks import load_task_set
from trace_train.analysis.probes import ProgrammaticLabeler, capabilities_for
from trace_train.trajectory import TrajectoryRecord

pytestmark = [pytest.mark.tau2, pytest.mark.skipif(not tau2_available(), reason="the real tau2 package is missing")]


def _labels(record: TrajectoryRecord) -> dict[str, str]:
    labeler = ProgrammaticLabeler(capabilities_for("tau2", include_generic=False), noise_rate=0.0)
    return {cap: label.name for (_, cap), label in labeler.clean_labels([record]).labels.items()}


def test_a_tool_named_like_the_envs_error_messages_is_scored_not_a_crash():
    env = gym.make("trace/tau2-retail-v0")
    env.reset(seed=0, options={"task_id": "0"})
    obs, *_ = env.step(format_tool_call("invalid_tool_call", {}))
    assert obs[0]["content"].startswith("Error:")
    _, reward, terminated, _, info = env.step("###STOP###")
    assert terminated and info["termination"] == "agent_stop" and reward == 0.0


def test_kwargs_are_checked_when_the_env_is_made(monkeypatch):
    with pytest.raises(ValueError, match="task_ids must be a list"):
        gym.make("trace/tau2-retail-v0", task_ids="12")
    with pytest.raises(ValueError, match="unknown τ² user 'bogus'"):
        gym.make("trace/tau2-airline-v0", user="bogus")
    seeds = []
    real = tau2_env.make_user
    monkeypatch.setattr(tau2_env, "make_user", lambda kind, task, config, seed: seeds.append(seed) or
                        real(kind, task, config, seed))
    env = gym.make("trace/tau2-retail-v0")
    env.reset(seed=0)
    env.reset()  # unseeded: the user still gets a seed, from the env's own generator
    assert seeds[0] == 0 and isinstance(seeds[1], int)


def test_items_listed_in_another_order_are_still_precise():
    """tau2 sorts ``item_ids`` before it acts: the gold's items reversed earn the same reward and the same label."""
    tasks = load_task_set("retail", "bundled").tasks
    tid = next(t for t, task in tasks.items() for a in (task.evaluation_criteria.actions or [])
               if a.name in ("exchange_delivered_order_items", "return_delivered_order_items")
               and len(set(a.arguments.get("item_ids", []))) >= 2)

    class Reversed:
        name = "reversed"

        def reset(self, obs, info, seed=None):
            task = tasks[tid].model_copy(deep=True)
            for action in task.evaluation_criteria.actions:
                if "item_ids" in action.arguments:
                    action.arguments = {k: (v[::-1] if k in ("item_ids", "new_item_ids") else v)
                                        for k, v in action.arguments.items()}
            self.turns = gold_turns(task, {t["function"]["name"] for t in info["tools"]})

        def act(self, obs):
            return self.turns.pop(0) if self.turns else "Thank you, goodbye."

    env = gym.make("trace/tau2-retail-v0")
    record = run_episode(env, Reversed(), 0, options={"task_id": tid}, env_id="trace/tau2-retail-v0")
    assert record.reward == 1.0 and _labels(record)["tool_calling_precision"] == "PRESENT"


@pytest.mark.parametrize("texts,label", [
    (["You paid $1.00 in total."], "LACKING"),  # a wrong total, without the order id
    (["Order {oid} has items at {parts}.", "Altogether you paid {answer}."], "PRESENT"),  # parts, then the total
    (["You paid {answer} (I first thought $1.00, but that was wrong)."], "LACKING"),  # a hedge, as the env scores it
])
def test_a_questions_answer_is_the_last_amount_stated(texts, label):
    env = gym.make("trace/structured_data_reasoning-v0", domain="tau2-retail")
    _, info = env.reset(seed=3, options={"case": "question"})
    task = info["task"]
    oid, answer = task["requests"][0]["entity_id"], task["gold"]["requests"][0]["answer"]
    parts = ", ".join(f"${item.price}" for item in env.unwrapped._episode.db.orders[oid].items)
    messages = [{"role": "user", "content": "how much?"}] + [
        {"role": "assistant", "content": t.format(oid=oid, parts=parts, answer=answer)} for t in texts]
    record = TrajectoryRecord(env_id="trace/structured_data_reasoning-v0", seed=3, messages=messages, reward=0.0,
                              success=False, termination="agent_stop", policy="p", info={"task": task})
    assert _labels(record)["structured_data_reasoning"] == label


def test_the_multi_step_familys_gold_goes_through_tau2_as_a_whole():
    """Two bag requests paid with one gift card each passed alone but not together (seeds 45, 57, 128)."""
    env = gym.make("trace/multi_step_task_completion-v0", domain="tau2-airline", min_ops=3, max_ops=5)
    for seed in (45, 57, 128):
        env.reset(seed=seed)
        episode = env.unwrapped._episode
        assert episode.domain.gold_ok(episode.initial_db, episode.gold_actions), seed
