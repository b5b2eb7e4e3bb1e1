"""Episodes/s of gold replay: trace-rl's thread-free τ² env vs tau2's own ``AgentGymEnv``.

Both run the same bundled tasks with the same scripted user (tau2's user LLM call is replaced by
trace-rl's ``ScriptedUser`` through tau2's documented monkeypatch point,
``tau2.user.user_simulator.generate``), the same gold tool calls and the same closing text, and both
score with tau2's ``evaluate_simulation``. Usage::

    python benchmarks/tau2_throughput.py --domains airline retail --tasks 10
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.table import Table

import trace_envs  # noqa: F401
from trace_envs.tau2.policies import run_episode
from trace_envs.tau2.runtime import require_tau2
from trace_envs.tau2.tasks import load_task_set
from trace_envs.tau2.users import ScriptedUser


def ours(domain: str, ids: list[str]) -> tuple[float, list[float]]:
    env = gym.make(f"trace/tau2-{domain}-v0", task_file="bundled")
    env.reset(seed=0, options={"task_id": ids[0]})  # warm-up (loads the DB once), not timed
    start = time.perf_counter()
    rewards = [run_episode(env, "gold", seed=0, options={"task_id": t}).reward for t in ids]
    return time.perf_counter() - start, rewards


class _ScriptedGenerate:
    """Stands in for tau2's user LLM: trace-rl's ScriptedUser over the role-flipped history."""

    def __init__(self) -> None:
        self.user: ScriptedUser | None = None
        self.started = False

    def episode(self, task: Any) -> None:
        self.user, self.started = ScriptedUser(task), False

    def __call__(self, model: str, messages: list[Any], tools: Any = None, **kwargs: Any) -> Any:
        from tau2.data_model.message import AssistantMessage

        assert self.user is not None
        last = messages[-1].content or ""
        if not self.started:
            self.started, text = True, self.user.opening(last)
        else:
            text = self.user.reply(last).text
        return AssistantMessage(role="assistant", content=text, cost=0.0)


def tau2_gym_actions(task: Any) -> list[str]:
    criteria = task.evaluation_criteria
    info = list(criteria.communicate_info or [])
    actions = [json.dumps({"name": a.name, "arguments": a.arguments}) for a in criteria.actions or []]
    return actions + ["Your request has been handled." + "".join(f" {s}." for s in info)]


def theirs(domain: str, ids: list[str]) -> tuple[float, list[float]]:
    import tau2.user.user_simulator as user_module
    from tau2.gym.gym_agent import AgentGymEnv

    tasks = load_task_set(domain, "bundled").tasks
    fake = _ScriptedGenerate()
    saved, user_module.generate = user_module.generate, fake
    try:
        def episode(task_id: str) -> float:
            fake.episode(tasks[task_id])
            env = AgentGymEnv(domain=domain, task_id=task_id, max_steps=200, user_llm="scripted")
            env.reset(seed=0)
            reward, terminated = 0.0, False
            for action in tau2_gym_actions(tasks[task_id]):
                _, reward, terminated, _, _ = env.step(action)
                if terminated:
                    break
            return reward

        episode(ids[0])  # warm-up, not timed
        start = time.perf_counter()
        rewards = [episode(t) for t in ids]
        return time.perf_counter() - start, rewards
    finally:
        user_module.generate = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", nargs="+", default=["airline", "retail"])
    parser.add_argument("--tasks", type=int, default=10, help="tasks per domain (first N without a transfer)")
    args = parser.parse_args()
    require_tau2()
    console = Console()
    table = Table(title="τ² gold replay throughput (episodes/s)")
    for col in ("domain", "episodes", "trace-rl", "tau2 AgentGymEnv", "ratio", "rewards (ours / tau2)"):
        table.add_column(col)
    for domain in args.domains:
        tasks = load_task_set(domain, "bundled").tasks
        ids = [t for t, task in tasks.items()
               if not any(a.name == "transfer_to_human_agents" for a in task.evaluation_criteria.actions or [])]
        ids = ids[: args.tasks]
        t_ours, r_ours = ours(domain, ids)
        t_theirs, r_theirs = theirs(domain, ids)
        eps_ours, eps_theirs = len(ids) / t_ours, len(ids) / t_theirs
        table.add_row(domain, str(len(ids)), f"{eps_ours:.2f}", f"{eps_theirs:.2f}", f"{eps_ours / eps_theirs:.1f}x",
                      f"{sum(r_ours):.0f}/{len(ids)} / {sum(r_theirs):.0f}/{len(ids)}")
    console.print(table)


if __name__ == "__main__":
    main()
