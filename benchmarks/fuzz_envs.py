"""Fuzz every tool-use env with hostile actions and count the exceptions that escape ``step``/``reset``.

Usage: python benchmarks/fuzz_envs.py [--actions 10000] [--seed 0] [--env trace/retail-sim-v0 ...]
Actions come from ``trace_envs.core.fuzz.ActionFuzzer`` (seeded numpy Generator): valid and mutated tool
calls, wrong types, unknown tools, nesting past the recursion limit, integer literals past the
int/str digit limit, lone surrogates, random bytes/Unicode, huge strings, malformed message dicts.
Target (issue 24): 0 escaped exceptions and 0 unwritable transcripts in >= 10,000 actions per env.
Exits 1 if any env is not clean.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import gymnasium as gym

import trace_envs  # noqa: F401
import trace_envs.examples.calculator  # noqa: F401  (registers the README's example env, my/calc-v0)
from trace_envs.core.fuzz import fuzz_env

ENV_IDS = (
    "trace/retail-sim-v0",
    "trace/precondition_verification-v0",
    "trace/structured_data_reasoning-v0",
    "trace/multi_step_task_completion-v0",
    "trace/tool_calling_precision-v0",
    "trace/tau2-airline-v0",
    "trace/tau2-retail-v0",
    "my/calc-v0",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", nargs="*", default=list(ENV_IDS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    header = (f"{'env':38s} {'actions':>8s} {'episodes':>9s} {'escaped':>8s} {'bad_steps':>9s} "
              f"{'unwritable':>10s} {'s':>7s}")
    print(header)
    print("-" * len(header))
    clean = True
    for k, env_id in enumerate(args.env):
        env = gym.make(env_id)
        start = time.perf_counter()
        report = fuzz_env(env, args.actions, seed=args.seed * 1000 + k, env_id=env_id)
        wall = time.perf_counter() - start
        env.close()
        print(f"{env_id:38s} {report.actions:8d} {report.episodes:9d} {report.escaped:8d} "
              f"{report.bad_steps:9d} {report.unwritable_transcripts:10d} {wall:7.1f}", flush=True)
        for failure in report.failures:
            print(f"    {failure.stage:10s} {failure.kind:15s} {failure.error}")
        clean = clean and report.clean
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
