"""What running an LLM-written env in its confined worker costs: the proxy (``confined=True``, the default) against
the module imported in-process (``confined=False``), with the oracle playing the good test module.

Usage: python benchmarks/confined_env_overhead.py [--episodes 200] [--starts 10] [--batch 64]

Prints per env: the mean time of one ``reset`` and one ``step`` (the oracle's own time, fetching its turns, is
left out), episodes/s, and the time to make the env (the proxy starts a worker subprocess: interpreter,
sandbox launcher, imports). Both envs play the same seeds and must give the same rewards.

Then a rollout batch: ``--batch`` instances made and reset at once (each then plays its oracle's first turn),
with shared workers (``instances_per_worker`` at its default) and with one worker per instance
(``instances_per_worker=1``, as before workers were shared): the wall time, the worker processes, their memory.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.synthesis.llm.llm_env_modules import GOOD  # noqa: E402
from trace_envs.swe import confinement as conf  # noqa: E402
from trace_envs.synthesis.llm.confined_env import INSTANCES_PER_WORKER, ConfinedEnv  # noqa: E402
from trace_envs.synthesis.llm.loader import make_env, sha256_text  # noqa: E402


def measure(path: str, sha: str, confined: bool, episodes: int) -> dict[str, float]:
    t0 = time.perf_counter()
    env = make_env(path, sha, confined=confined)
    made = time.perf_counter() - t0
    resets, steps, rewards = [], [], []
    start = time.perf_counter()
    for seed in range(episodes):
        t0 = time.perf_counter()
        env.reset(seed=seed)
        resets.append(time.perf_counter() - t0)
        for turn in env.oracle_turns():
            t0 = time.perf_counter()
            _, reward, terminated, truncated, _ = env.step(turn)
            steps.append(time.perf_counter() - t0)
            if terminated or truncated:
                break
        rewards.append(reward)
    wall = time.perf_counter() - start
    env.close()
    return {"make_s": made, "reset_ms": 1e3 * statistics.mean(resets), "step_ms": 1e3 * statistics.mean(steps),
            "step_p50_ms": 1e3 * statistics.median(steps), "episodes_per_s": episodes / wall, "steps": len(steps),
            "rewards": rewards}


def _rss_bytes(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:")), 0)
        except OSError:
            pass
    return total


def batch(path: str, sha: str, n: int, cap: int) -> dict[str, float]:
    """Make ``n`` instances and reset each (then one oracle turn each); the wall time and the workers' footprint."""
    gc.collect()
    t0 = time.perf_counter()
    envs = [ConfinedEnv(path, sha, instances_per_worker=cap) for _ in range(n)]
    for seed, env in enumerate(envs):
        env.reset(seed=seed)
    reset_s = time.perf_counter() - t0
    for env in envs:
        env.step(env.oracle_turns()[0])
    played_s = time.perf_counter() - t0
    workers = list({id(e._worker): e._worker for e in envs}.values())
    pids = set().union(*(w.pids() for w in workers))
    rss, anon = _rss_bytes(pids), conf.anon_memory_bytes(pids)
    t0 = time.perf_counter()
    for env in envs:
        env.close()
    close_s = time.perf_counter() - t0
    assert all(w.dead for w in workers), "a worker outlived its instances"
    return {"reset_s": reset_s, "played_s": played_s, "close_s": close_s, "workers": len(workers),
            "processes": len(pids), "rss_mb": rss / 2**20, "anon_mb": anon / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--starts", type=int, default=10, help="worker starts timed (make + first reset + close)")
    parser.add_argument("--batch", type=int, default=64, help="instances of the rollout-batch figure (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "transfer_when_stuck_llm_source.py"
        path.write_text(GOOD, encoding="utf-8")
        sha = sha256_text(GOOD)
        rows = {"in-process": measure(str(path), sha, False, args.episodes),
                "confined": measure(str(path), sha, True, args.episodes)}
        assert rows["in-process"]["rewards"] == rows["confined"]["rewards"], "the proxy changed a reward"
        for name, r in rows.items():
            print(f"{name:10s} reset {r['reset_ms']:7.3f} ms  step {r['step_ms']:7.3f} ms (median "
                  f"{r['step_p50_ms']:.3f})  {r['episodes_per_s']:7.1f} episodes/s  ({r['steps']} steps)")
        a, b = rows["in-process"], rows["confined"]
        print(f"overhead per step {b['step_ms'] - a['step_ms']:.3f} ms, per reset {b['reset_ms'] - a['reset_ms']:.3f} "
              f"ms; episodes/s x{b['episodes_per_s'] / a['episodes_per_s']:.2f}")
        starts = []
        for _ in range(args.starts):
            t0 = time.perf_counter()
            env = make_env(str(path), sha)
            env.reset(seed=0)
            env.close()
            starts.append(time.perf_counter() - t0)
        print(f"worker start (make + first reset + close): median {statistics.median(starts):.3f} s, "
              f"max {max(starts):.3f} s over {args.starts}")
        if args.batch > 0:
            rows = {f"shared (cap {INSTANCES_PER_WORKER})": batch(str(path), sha, args.batch, INSTANCES_PER_WORKER),
                    "one worker each (cap 1)": batch(str(path), sha, args.batch, 1)}
            for name, r in rows.items():
                print(f"batch of {args.batch}, {name:24s}: make + reset all {r['reset_s']:6.2f} s (+ one step each "
                      f"{r['played_s'] - r['reset_s']:.2f} s), close all {r['close_s']:.2f} s; {r['workers']} workers "
                      f"({r['processes']} processes), RSS {r['rss_mb']:,.0f} MB, anonymous {r['anon_mb']:,.0f} MB")
            shared, alone = rows.values()
            print(f"batch of {args.batch}: make + reset all x{alone['reset_s'] / shared['reset_s']:.1f} faster shared, "
                  f"workers' RSS x{alone['rss_mb'] / shared['rss_mb']:.1f} smaller")


if __name__ == "__main__":
    main()
