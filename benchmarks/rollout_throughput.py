"""Throughput of the batched ``hf`` rollout backend vs advancing the same episodes one at a time.

One group of G episodes (same env seed, distinct sample seeds) on trace/retail-sim-v0 with an
untrained tiny model and a tokenizer built on scripted-expert episodes. Each mode runs in its own
subprocess so that peak RSS (``resource.getrusage``) is per mode; Python-heap peak via tracemalloc.

    .venv/bin/python benchmarks/rollout_throughput.py [--group 16] [--max-new-tokens 32] [--max-turns 4]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _setup(args):
    import gymnasium as gym
    import torch

    import trace_envs  # noqa: F401
    from trace_envs.retail_sim import ScriptedExpert, atomic_vocabulary, run_episode
    from trace_train.model import build_model, build_tokenizer, chat_corpus
    from trace_train.rollout import EpisodeRequest
    from trace_train.rollout.hf import HFRolloutBackend

    torch.set_num_threads(1)
    env = gym.make("trace/retail-sim-v0")
    episodes = []
    for seed in range(40):
        _, _, transcript = run_episode(env, ScriptedExpert(seed=seed), seed)
        episodes.append((transcript, env.unwrapped._episode.tools.schemas()))
    tok = build_tokenizer(chat_corpus(episodes), atomic_vocabulary(), vocab_size=1024, seed=0)
    model = build_model(args.preset, tok, seed=0)
    backend = HFRolloutBackend(model, tok, threads=1, max_turns=args.max_turns)
    requests = [EpisodeRequest("trace/retail-sim-v0", seed=1000, sample_seed=s, group=0) for s in range(args.group)]
    return backend, requests


def run_mode(args) -> dict:
    from trace_train.rollout import SamplingParams

    backend, requests = _setup(args)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    tracemalloc.start()
    start = time.perf_counter()
    if args.mode == "batched":
        records = backend.rollout(requests, sampling)
    else:
        records = [backend.rollout([req], sampling)[0] for req in requests]
    wall = time.perf_counter() - start
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    generated = sum(r.info["generated_tokens"] for r in records)
    digest = hashlib.sha256(json.dumps([r.token_ids for r in records]).encode()).hexdigest()[:12]
    return {
        "mode": args.mode, "episodes": len(records), "wall_s": round(wall, 3),
        "generated_tokens": generated, "tokens_per_s": round(generated / wall, 1),
        "episodes_per_s": round(len(records) / wall, 3),
        "mean_context_tokens": round(sum(len(r.token_ids) for r in records) / len(records), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python_heap_peak_mb": round(py_peak / 2**20, 2), "token_ids_sha": digest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["batched", "sequential", "both"], default="both")
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    args = parser.parse_args()
    if args.mode != "both":
        print(json.dumps(run_mode(args)))
        return
    results = []
    for mode in ("batched", "sequential"):
        cmd = [sys.executable, __file__, "--mode", mode, "--group", str(args.group), "--max-new-tokens",
               str(args.max_new_tokens), "--max-turns", str(args.max_turns), "--preset", args.preset]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"hf rollout, group {args.group}, 1 thread, preset {args.preset}")
    for key in results[0]:
        table.add_column(key)
    for row in results:
        table.add_row(*(str(v) for v in row.values()))
    console = Console()
    console.print(table)
    batched, sequential = results
    console.print(f"speed-up (tokens/s): {batched['tokens_per_s'] / sequential['tokens_per_s']:.2f}x; "
                  f"same episodes: {batched['token_ids_sha'] == sequential['token_ids_sha']}")


if __name__ == "__main__":
    main()
