"""Overhead of the token-level MoE composer vs serving one LoRA with peft (same base, same batch).

    .venv/bin/python benchmarks/moe_overhead.py [--hidden 512 --layers 4 --batch 4 --seq 256 --threads 1]

Variants (timed round-robin in one process, so CPU contention hits all alike):
  base      the base model alone
  peft      base + one LoRA adapter (peft, unmerged)
  composed  base + 4 adapters + gates, top-1 routing (gates randomised so adapters are really chosen)

Latency: min and median forward (prefill) time over --repeats, and min per-token decode step with
KV cache. Memory: peak bytes of live tensors allocated during one forward pass (torch profiler memory
events, deterministic) and the bytes of parameters and buffers.
Prints the composed / peft ratios (target <= 1.3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _peak_tensor_bytes(fn) -> int:
    """Peak of the running sum of CPU allocations/frees the profiler records while ``fn`` runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def _config(args):
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                       num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
                       head_dim=args.hidden // 8, max_position_embeddings=4096)


def prepare(args, root: Path) -> None:
    """Save a random base and 4 random rank-r adapters (q,k,v,o) under ``root``."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)  # benchmark script, not library code
    Qwen3ForCausalLM(_config(args)).save_pretrained(root / "base")
    gen = torch.Generator().manual_seed(1)
    for i in range(4):
        model = Qwen3ForCausalLM.from_pretrained(str(root / "base"))
        pm = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=args.rank,
                                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        pm.save_pretrained(root / f"cap{i}")


def build(args, root: Path, variant: str):
    from peft import PeftModel
    from transformers import Qwen3ForCausalLM

    from trace_moe import ComposedModel, GateConfig

    base = Qwen3ForCausalLM.from_pretrained(str(root / "base")).eval()
    if variant == "peft":
        return PeftModel.from_pretrained(base, str(root / "cap0")).eval()
    if variant == "composed":
        model = ComposedModel.from_pretrained(root / "base", [root / f"cap{i}" for i in range(4)],
                                              GateConfig(top_k=1, init="zero")).eval()
        gen = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for g in model.gates:
                g.proj.weight.copy_(torch.randn(g.proj.weight.shape, generator=gen) * 0.5)
        return model
    return base


def _decode_step(model, ids: torch.Tensor):
    out = model(input_ids=ids, use_cache=True)
    state = {"cache": out.past_key_values, "next": out.logits[:, -1:].argmax(-1)}

    def step() -> None:
        o = model(input_ids=state["next"], cache=state["cache"], use_cache=True)
        state["cache"], state["next"] = o.past_key_values, o.logits[:, -1:].argmax(-1)

    return step


@torch.no_grad()
def run(args, root: Path) -> dict[str, dict]:
    """Time all variants round-robin in one process (contention hits them alike); min and median."""
    torch.set_num_threads(args.threads)
    variants = ("base", "peft", "composed")
    models = {v: build(args, root, v) for v in variants}
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(3))
    results: dict[str, dict] = {}
    for v, m in models.items():
        m(input_ids=ids)  # warm-up
        state = sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
        results[v] = {"forward": [], "decode": [], "state_mib": state / 2**20,
                      "tensor_peak_mib": _peak_tensor_bytes(lambda m=m: m(input_ids=ids)) / 2**20}
    steps = {v: _decode_step(m, ids[:, : args.seq // 4]) for v, m in models.items()}
    for _ in range(args.repeats):
        for v, m in models.items():
            t0 = time.perf_counter()
            m(input_ids=ids)
            results[v]["forward"].append(time.perf_counter() - t0)
    for _ in range(args.decode_steps):
        for v in variants:
            t0 = time.perf_counter()
            steps[v]()
            results[v]["decode"].append(time.perf_counter() - t0)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prepare(args, Path(tmp))
        res = run(args, Path(tmp))
    print(f"Qwen3 hidden={args.hidden} layers={args.layers} batch={args.batch}x{args.seq} rank={args.rank} "
          f"threads={args.threads} repeats={args.repeats}")
    print(f"{'variant':10s} {'fwd min ms':>11s} {'fwd med ms':>11s} {'decode min ms':>14s} "
          f"{'tensor peak MiB':>16s} {'state MiB':>10s}")
    for v, r in res.items():
        print(f"{v:10s} {1e3 * min(r['forward']):11.1f} {1e3 * statistics.median(r['forward']):11.1f} "
              f"{1e3 * min(r['decode']):14.2f} {r['tensor_peak_mib']:16.1f} {r['state_mib']:10.1f}")
    c, p = res["composed"], res["peft"]
    print(f"composed/peft: forward {min(c['forward']) / min(p['forward']):.3f}x (min) "
          f"{statistics.median(c['forward']) / statistics.median(p['forward']):.3f}x (median), decode step "
          f"{min(c['decode']) / min(p['decode']):.3f}x, forward tensor peak "
          f"{c['tensor_peak_mib'] / p['tensor_peak_mib']:.3f}x, state {c['state_mib'] / p['state_mib']:.3f}x "
          f"(target <= 1.3)")


if __name__ == "__main__":
    main()
