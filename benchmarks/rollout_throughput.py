"""Throughput of the batched ``hf`` rollout backend vs advancing the same episodes one at a time,
vs the same backend without cross-turn KV caches, and vs a bare decode-loop bound.

One group of G episodes (same env seed, distinct sample seeds) on trace/retail-sim-v0 with an
untrained tiny model and a tokenizer built on scripted-expert episodes (or, with ``--checkpoint``,
a saved policy such as checkpoints/retail-sim-tiny on ``--env``). Each mode runs in its own
subprocess so that peak RSS (``resource.getrusage``) is per mode; Python-heap peak via tracemalloc.

``bound``: the machine's limit for the same shapes: the same model and batch, one prefill of the
episodes' mean non-sampled length, then greedy decoding of their mean sampled length in one stream
(no env, no per-row samplers, no padding, no turns). Ours is printed as a fraction of it.

The timed pass runs without ``tracemalloc`` (it hooks every allocation and slowed ours by up to 1.7x
while the bound ran without it); the heap peak is read from a second, untimed pass of the same episodes.

``--warmup N`` (default 1): each mode first runs N untimed passes of the same shapes (ours: the same requests on
env seeds 10,000 higher; the bound: its loop), as every GRPO iteration after the first sees them; ``--warmup 0``
measures a cold process (first-call allocations and kernel selection included).

    .venv/bin/python benchmarks/rollout_throughput.py [--group 16] [--max-new-tokens 32] [--max-turns 4]
    .venv/bin/python benchmarks/rollout_throughput.py --checkpoint checkpoints/retail-sim-tiny \
        --env trace/precondition_verification-v0 --group 8 --groups 4 --max-new-tokens 96 --max-turns 0
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
    if args.checkpoint:
        from trace_train.model.factory import load_policy

        model, tok = load_policy(args.checkpoint)
        render_tools = False  # as the shipped base was trained (bootstrap BC data)
    else:
        env = gym.make("trace/retail-sim-v0")
        episodes = []
        for seed in range(40):
            _, _, transcript = run_episode(env, ScriptedExpert(seed=seed), seed)
            episodes.append((transcript, env.unwrapped._episode.tools.schemas()))
        tok = build_tokenizer(chat_corpus(episodes), atomic_vocabulary(), vocab_size=1024, seed=0)
        model = build_model(args.preset, tok, seed=0)
        render_tools = True
    backend = HFRolloutBackend(model, tok, threads=1, max_turns=args.max_turns or None, render_tools=render_tools,
                               keep_cache=args.mode != "nocache")
    requests = [EpisodeRequest(args.env, seed=1000 + g, sample_seed=s, group=g)
                for g in range(args.groups) for s in range(args.group)]
    return backend, requests


def _warmup_requests(requests: list) -> list:
    """The same shapes on other env seeds (untimed passes must not replay the timed episodes)."""
    from dataclasses import replace

    return [replace(r, seed=r.seed + 10_000) for r in requests]


def run_bound(args) -> dict:
    """Bare batched decode loop: same model and batch, mean prompt / completion lengths, no env."""
    import torch

    from trace_train.rollout.hf_generate import _cache_kwarg, _out_cache
    from trace_train.rollout.kv_cache import make_cache

    backend, requests = _setup(args)
    model, n = backend.model.eval(), len(requests)
    prompt, completion = args.prompt_len, args.completion_len
    ids = torch.randint(3, model.config.vocab_size, (n, prompt), generator=torch.Generator().manual_seed(0))
    kw = _cache_kwarg(model)

    def decode() -> None:
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{kw: make_cache(prompt + completion)})
            for _ in range(completion - 1):
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(input_ids=token, use_cache=True, **{kw: _out_cache(out)})

    for _ in range(args.warmup):
        decode()
    start, cpu0 = time.perf_counter(), time.process_time()
    decode()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    return {"mode": "bound", "episodes": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "cpu_tokens_per_s": round(n * completion / cpu, 1), "generated_tokens": n * completion,
            "tokens_per_s": round(n * completion / wall, 1), "episodes_per_s": round(n / wall, 3),
            "mean_context_tokens": prompt + completion,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "python_heap_peak_mb": None, "token_ids_sha": None, "env_s": None}


def run_mode(args) -> dict:
    from trace_train.rollout import SamplingParams

    if args.mode == "bound":
        return run_bound(args)
    backend, requests = _setup(args)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)

    def play(reqs: list) -> tuple[list, float]:
        if args.mode in ("batched", "nocache"):
            return backend.rollout(reqs, sampling), backend.last_timings["env_s"]
        records, env_s = [], 0.0
        for req in reqs:
            records.append(backend.rollout([req], sampling)[0])
            env_s += backend.last_timings["env_s"]
        return records, env_s

    for _ in range(args.warmup):
        play(_warmup_requests(requests))
    start, cpu0 = time.perf_counter(), time.process_time()
    records, env_s = play(requests)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    # The Python-heap peak comes from a second, untimed pass of the same episodes: tracemalloc hooks
    # every allocation and would slow the timed pass (the bound runs without it).
    tracemalloc.start()
    traced, _ = play(requests)
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if [r.token_ids for r in traced] != [r.token_ids for r in records]:
        raise RuntimeError("the traced pass played different episodes than the timed pass")
    generated = sum(r.info["generated_tokens"] for r in records)
    digest = hashlib.sha256(json.dumps([r.token_ids for r in records]).encode()).hexdigest()[:12]
    return {
        "mode": args.mode, "episodes": len(records), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "cpu_tokens_per_s": round(sum(r.info["generated_tokens"] for r in records) / cpu, 1),
        "generated_tokens": generated, "tokens_per_s": round(generated / wall, 1),
        "episodes_per_s": round(len(records) / wall, 3),
        "mean_context_tokens": round(sum(len(r.token_ids) for r in records) / len(records), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python_heap_peak_mb": round(py_peak / 2**20, 2), "token_ids_sha": digest, "env_s": round(env_s, 3),
        "sampled_per_episode": round(generated / len(records), 1),
        "non_sampled_per_episode": round(sum(len(r.token_ids) for r in records) / len(records) - generated
                                         / len(records), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["batched", "nocache", "sequential", "bound", "both"], default="both")
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--env", default="trace/retail-sim-v0")
    parser.add_argument("--checkpoint", default="", help="a saved policy directory (default: untrained tiny)")
    parser.add_argument("--prompt-len", type=int, default=0, help=argparse.SUPPRESS)  # bound mode
    parser.add_argument("--completion-len", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes of the same shapes first (0: cold)")
    args = parser.parse_args()
    if args.mode != "both":
        print(json.dumps(run_mode(args)))
        return
    results = []
    for mode in ("batched", "nocache", "sequential", "bound"):
        cmd = [sys.executable, __file__, "--mode", mode, "--group", str(args.group), "--groups", str(args.groups),
               "--max-new-tokens", str(args.max_new_tokens), "--max-turns", str(args.max_turns),
               "--preset", args.preset, "--env", args.env, "--checkpoint", args.checkpoint,
               "--warmup", str(args.warmup)]
        if mode == "bound":
            shape = results[0]
            cmd += ["--prompt-len", str(round(shape["non_sampled_per_episode"])),
                    "--completion-len", str(max(round(shape["sampled_per_episode"]), 1))]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    from rich.console import Console
    from rich.table import Table

    keys = ["mode", "episodes", "wall_s", "cpu_s", "env_s", "generated_tokens", "tokens_per_s", "cpu_tokens_per_s",
            "episodes_per_s", "mean_context_tokens", "peak_rss_mb", "python_heap_peak_mb", "token_ids_sha"]
    model = args.checkpoint or f"untrained {args.preset}"
    table = Table(title=f"hf rollout on {args.env}, {args.groups} x G={args.group}, 1 thread, {model}, "
                        f"{args.warmup} untimed warm-up pass(es)")
    for key in keys:
        table.add_column(key)
    for row in results:
        table.add_row(*(str(row.get(k)) for k in keys))
    console = Console(width=220)
    console.print(table)
    batched, nocache, sequential, bound = results
    same = batched["token_ids_sha"] == sequential["token_ids_sha"] == nocache["token_ids_sha"]
    rate = "cpu_tokens_per_s"  # CPU time: robust to other processes on a shared machine (1 thread each)
    console.print(f"speed-up (tokens per CPU-second): {batched[rate] / sequential[rate]:.2f}x vs one at a "
                  f"time, {batched[rate] / nocache[rate]:.2f}x vs no cross-turn KV cache; same episodes: {same}")
    model_only = batched["generated_tokens"] / max(batched["wall_s"] - batched["env_s"], 1e-9)
    console.print(f"bound (bare decode, {bound['mean_context_tokens']} tokens/row): {bound[rate]} tokens per "
                  f"CPU-second; ours = {batched[rate] / bound[rate]:.2f} of it (wall clock: "
                  f"{batched['tokens_per_s'] / bound['tokens_per_s']:.2f}, {model_only / bound['tokens_per_s']:.2f} "
                  f"without env time)")


if __name__ == "__main__":
    main()
