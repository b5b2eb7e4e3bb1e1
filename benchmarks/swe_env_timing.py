"""Timing of the SWE envs on the local backend: reset, an oracle localization episode, a graded repair.

Usage: python benchmarks/swe_env_timing.py [--episodes 5]
Also reports the oracle's mean reward per mode (must be 1.0) and the gold/empty verdicts of every
built-in local SWE task.
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from trace_envs.core.parsing import format_tool_call
from trace_envs.swe.codeloc.env import CodeLocalizationEnv
from trace_envs.swe.env import SWEBenchEnv


def codeloc(mode: str, episodes: int) -> dict[str, float]:
    env = CodeLocalizationEnv(mode=mode)
    resets, episodes_t, rewards = [], [], []
    try:
        for seed in range(episodes):
            t0 = time.perf_counter()
            env.reset(seed=seed)
            t1 = time.perf_counter()
            for action in env.oracle_actions():
                _, reward, *_ = env.step(action)
            resets.append(t1 - t0)
            episodes_t.append(time.perf_counter() - t0)
            rewards.append(reward)
    finally:
        env.close()
    return {"reset_s": statistics.median(resets), "episode_s": statistics.median(episodes_t),
            "oracle_reward": statistics.mean(rewards)}


def swe_local() -> dict[str, float]:
    env = SWEBenchEnv(dataset="local", backend="local")
    gold, empty, times = [], [], []
    try:
        for i in range(len(env.load_tasks())):
            for use_gold in (True, False):
                t0 = time.perf_counter()
                env.reset(seed=0, options={"task_index": i})
                if use_gold:
                    patch = env.episode.task.patch
                    env.step(format_tool_call("bash", {"command": f"git apply - <<'EOF'\n{patch}EOF"}))
                _, reward, *_ = env.step(format_tool_call("submit", {}))
                times.append(time.perf_counter() - t0)
                (gold if use_gold else empty).append(reward)
    finally:
        env.close()
    return {"reset_s": float("nan"), "episode_s": statistics.median(times), "oracle_reward": statistics.mean(gold),
            "empty_reward": statistics.mean(empty)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5)
    args = parser.parse_args()
    table = Table(title="SWE envs, local backend")
    for col in ("env", "median reset s", "median episode s", "oracle reward", "empty-patch reward"):
        table.add_column(col, no_wrap=True)
    for mode in ("localize", "repair", "localize+verify"):
        r = codeloc(mode, args.episodes)
        table.add_row(f"code_localization/{mode}", f"{r['reset_s']:.2f}", f"{r['episode_s']:.2f}",
                      f"{r['oracle_reward']:.2f}", "-")
    r = swe_local()
    table.add_row("swebench/local tasks", "-", f"{r['episode_s']:.2f}", f"{r['oracle_reward']:.2f}",
                  f"{r['empty_reward']:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
