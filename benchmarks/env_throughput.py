"""Env throughput with the scripted oracle on one core: env steps/s and episodes/s.

Usage: python benchmarks/env_throughput.py [--episodes 2000] [--env trace/retail-sim-v0 ...]
Target (issue 2): >= 2,000 steps/s on retail-sim (pure Python). The policy's own time is measured
separately and subtracted, so the figure is the env's.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import trace_envs  # noqa: F401
from trace_envs.retail_sim import ScriptedExpert


def measure(env_id: str, episodes: int) -> dict[str, float]:
    env = gym.make(env_id)
    policy = ScriptedExpert()
    steps = 0
    env_time = 0.0
    start = time.perf_counter()
    for seed in range(episodes):
        t0 = time.perf_counter()
        obs, info = env.reset(seed=seed)
        env_time += time.perf_counter() - t0
        policy.reset(obs, info, seed=seed)
        done = False
        while not done:
            action = policy.act(obs)
            t0 = time.perf_counter()
            obs, _, terminated, truncated, _ = env.step(action)
            env_time += time.perf_counter() - t0
            steps += 1
            done = terminated or truncated
    wall = time.perf_counter() - start
    return {"steps": steps, "episodes": episodes, "env_steps_per_s": steps / env_time,
            "env_episodes_per_s": episodes / env_time, "wall_steps_per_s": steps / wall}


# -- capability env families (issue 3): the same oracle plays them (family tasks keep retail-sim's task shape)
FAMILY_ENVS = [
    "trace/precondition_verification-v0",
    "trace/structured_data_reasoning-v0",
    "trace/multi_step_task_completion-v0",
    "trace/tool_calling_precision-v0",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--env", action="append", default=None)
    args = parser.parse_args()
    for env_id in args.env or ["trace/retail-sim-v0", *FAMILY_ENVS]:
        r = measure(env_id, args.episodes)
        print(f"{env_id:40s} env steps/s {r['env_steps_per_s']:9.0f}  episodes/s {r['env_episodes_per_s']:8.1f}  "
              f"(with policy: {r['wall_steps_per_s']:.0f} steps/s; {r['steps']} steps)")


if __name__ == "__main__":
    main()
