"""GRPO update time per iteration with ``grpo.packing`` none (padded) vs bucketed vs packed, in one run.

The batch is real: 64 episodes (8 groups x G = 8) of ``trace/precondition_verification-v0`` played by
the shipped base with the ``hf`` rollout backend (96 max new tokens per turn). Every episode is trained
(constant groups keep advantage 0, so the batch is the same in every mode); each mode gets its own
copy of the same LoRA (r 16 on q/k/v/o, the default) and AdamW, and the modes take turns
(``--reps`` rounds) so machine load hits them alike. Printed: seconds per ``optimize`` call (one
iteration's update: forward, backward, AdamW) per mode, median over rounds (wall clock and process
CPU time: on a shared machine the wall clock mostly measures the other processes), and the ratios; the old
log-prob recomputation (``sequence_logprobs``) the same way; and the largest log-prob difference
between modes on the first micro-batch (float32).

    python benchmarks/grpo_update_packing.py [--micro 4] [--reps 3]
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import time

import numpy as np
import torch

ENV_ID = "trace/precondition_verification-v0"
MODES = ("none", "bucketed", "packed")


def episodes(model, tok, groups: int, group_size: int, tokens: int):
    import trace_envs  # noqa: F401
    from trace_train.grpo.advantages import group_advantages
    from trace_train.grpo.update import Sample
    from trace_train.rollout.base import SamplingParams, group_requests
    from trace_train.rollout.hf import HFRolloutBackend

    backend = HFRolloutBackend(model, tok, threads=1, render_tools=False)
    records = backend.rollout(group_requests(ENV_ID, {}, list(range(groups)), group_size),
                              SamplingParams(max_new_tokens=tokens))
    rewards = np.asarray([r.reward for r in records], dtype=np.float64)
    adv = group_advantages(rewards, group_size, "group", 1e-6)
    return [Sample(r.token_ids, r.loss_mask, float(adv.values[i]) if adv.keep[i] else 0.0)
            for i, r in enumerate(records)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="policy dir (default: the shipped base)")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--micro", type=int, default=4, help="grpo.micro_batch_size")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)

    from trace_train.grpo.config import GRPOConfig
    from trace_train.grpo.lora import LoraSettings, attach_adapter, trainable_parameters
    from trace_train.grpo.update import micro_batch_logprobs, optimize, sequence_logprobs
    from trace_train.model.factory import load_policy
    from trace_train.paths import shipped_checkpoint

    model, tok = load_policy(args.checkpoint or shipped_checkpoint())
    samples = episodes(model, tok, args.groups, args.group_size, args.tokens)
    lengths = [len(s.token_ids) for s in samples]
    models = {m: attach_adapter(copy.deepcopy(model), "bench", LoraSettings()) for m in MODES}
    params = {m: [p for _, p in trainable_parameters(lm)] for m, lm in models.items()}
    optims = {m: torch.optim.AdamW(params[m], lr=1e-5) for m in MODES}
    cfgs = {m: GRPOConfig(micro_batch_size=args.micro, packing=m) for m in MODES}

    with torch.no_grad():
        first = samples[: args.micro]
        ref = micro_batch_logprobs(models["none"].eval(), first, 1.0, "none")
        diffs = {m: float((ref[0] - micro_batch_logprobs(models[m].eval(), first, 1.0, m)[0])[ref[2] > 0].abs().max())
                 for m in MODES[1:]}

    update: dict[str, list[float]] = {m: [] for m in MODES}
    update_cpu: dict[str, list[float]] = {m: [] for m in MODES}
    logprobs: dict[str, list[float]] = {m: [] for m in MODES}
    for rep in range(args.reps + 1):  # round 0 warms up and is not counted
        for m in MODES:
            models[m].eval()
            t0 = time.perf_counter()
            sequence_logprobs(models[m], samples, args.micro, 1.0, packing=m)
            t1, c1 = time.perf_counter(), time.process_time()
            optimize(models[m], optims[m], params[m], samples, cfgs[m], rep, None, None, tok.pad_token_id or 0)
            t2, c2 = time.perf_counter(), time.process_time()
            if rep:
                logprobs[m].append(t1 - t0)
                update[m].append(t2 - t1)
                update_cpu[m].append(c2 - c1)

    padded_tokens = sum(max(lengths[i: i + args.micro]) * len(lengths[i: i + args.micro])
                        for i in range(0, len(lengths), args.micro))
    print(f"batch: {len(samples)} episodes of {ENV_ID} from the shipped base, {sum(lengths)} tokens "
          f"(lengths {min(lengths)}-{max(lengths)}), {sum(s.n_tokens for s in samples)} sampled; micro-batch "
          f"{args.micro}: {padded_tokens} padded tokens ({1 - sum(lengths) / padded_tokens:.1%} padding)")
    med = {m: statistics.median(update[m]) for m in MODES}
    cpu = {m: statistics.median(update_cpu[m]) for m in MODES}
    lp = {m: statistics.median(logprobs[m]) for m in MODES}
    for m in MODES:
        label = "padded" if m == "none" else m
        print(f"{label:8s} update {med[m]:6.2f} s/iteration  (rounds {', '.join(f'{x:.2f}' for x in update[m])}; "
              f"{cpu[m]:.2f} CPU-s)   old log-probs {lp[m]:5.2f} s")
    for m in MODES[1:]:
        print(f"ratio padded/{m}: update {med['none'] / med[m]:.2f}x ({cpu['none'] / cpu[m]:.2f}x per CPU-second), "
              f"old log-probs {lp['none'] / lp[m]:.2f}x; "
              f"max |log-prob diff| vs padded {diffs[m]:.1e}")


if __name__ == "__main__":
    main()
