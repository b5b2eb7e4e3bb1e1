"""Bootstrap step time with ``bootstrap.packing`` none (padded, how the shipped base was made) vs packed, per stage.

For every stage of the shipped chain (``conf/bootstrap/default.yaml`` and its ``init_from`` stages) the benchmark
takes that stage's first ``--steps`` BC batches and times one training step each (forward, loss with the copy and
decision terms, backward, clip, AdamW) from the shipped base's weights, the two modes taking turns batch by batch
(``--reps`` rounds, after one untimed step each) so machine load hits them alike. Printed per stage: the share of
padded tokens, seconds per step (median; wall clock and process CPU time), the ratio, the largest gradient
difference between the modes relative to the gradient's size, and the chain's projected minutes (each stage's
steps x its median step time; making the BC episodes, ~0.15 s a step, and the probes are not included).

    python benchmarks/bootstrap_packing.py [--steps 6] [--reps 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import time

import torch

MODES = ("none", "packed")


def chain(config) -> list:
    """The stages of a bootstrap config (``BootstrapConfig.parent`` upwards), first stage first."""
    stages = []
    while config is not None:
        stages.append(config)
        config = config.parent
    return stages[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="batches timed per stage")
    parser.add_argument("--reps", type=int, default=2, help="rounds over those batches")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)

    from omegaconf import OmegaConf

    from trace_train.bootstrap.config import BootstrapConfig
    from trace_train.bootstrap.data import batches
    from trace_train.bootstrap.decisions import DecisionHead
    from trace_train.bootstrap.ownership_circuit import OwnershipReadouts
    from trace_train.bootstrap.trainer import batch_loss
    from trace_train.model import ChatRenderer, load_policy
    from trace_train.model.chat_template import chat_template
    from trace_train.paths import CONF_DIR, shipped_checkpoint

    shipped = shipped_checkpoint()
    base, tokenizer = load_policy(shipped)
    tokenizer.chat_template = chat_template("none")
    renderer = ChatRenderer(tokenizer)
    shipped_config = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "bootstrap" / "default.yaml"), resolve=True)
    stages = {mode: chain(BootstrapConfig.from_dict({**shipped_config, "packing": mode})) for mode in MODES}
    print(f"base {shipped}; {args.steps} batches per stage, {args.reps} rounds, {args.threads} threads")
    print(f"{'stage':>5} {'steps':>5} {'padding':>8} {'padded s/step (CPU)':>20} {'packed s/step (CPU)':>20} "
          f"{'ratio':>6} {'grad diff':>9}")
    minutes = {mode: 0.0 for mode in MODES}
    for number, pair in enumerate(zip(*(stages[mode] for mode in MODES)), start=1):
        cfg = dict(zip(MODES, pair))
        data = [examples for _, (_, examples, _) in zip(range(args.steps), batches(cfg["none"], renderer, 0))]
        real = sum(len(e.ids) for b in data for e in b)
        padded = sum(max(len(e.ids) for e in b) * len(b) for b in data)
        states = {}
        torch.manual_seed(0)  # one decision head, copied into both modes
        padded_cfg = cfg["none"]
        head0 = DecisionHead(base.config.hidden_size, padded_cfg.decisions) if padded_cfg.decision_loss_weight else None
        readouts0 = OwnershipReadouts(base.config.hidden_size) if padded_cfg.ownership_circuit is not None else None
        for mode in MODES:
            model = copy.deepcopy(base).train()
            head, readouts = copy.deepcopy(head0), copy.deepcopy(readouts0)
            params = [*model.parameters(), *(head.parameters() if head is not None else ()),
                      *(readouts.parameters() if readouts is not None else ())]
            states[mode] = (model, (head, readouts), params, torch.optim.AdamW(params, lr=cfg[mode].lr))
        for mode in MODES:  # one untimed step each: first-call allocations are not a step's cost
            model, heads, params, optimizer = states[mode]
            batch_loss(model, heads[0], data[0], cfg[mode], tokenizer.pad_token_id, heads[1]).total.backward()
            model.zero_grad(set_to_none=True)
        wall = {mode: [] for mode in MODES}
        cpu = {mode: [] for mode in MODES}
        grads = {}
        for _ in range(args.reps):
            for i, examples in enumerate(data):
                for mode in MODES:
                    model, heads, params, optimizer = states[mode]
                    t0, c0 = time.perf_counter(), time.process_time()
                    loss = batch_loss(model, heads[0], examples, cfg[mode], tokenizer.pad_token_id, heads[1]).total
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if i == 0 and mode not in grads:
                        grads[mode] = torch.cat([p.grad.flatten() for p in model.parameters()])
                    torch.nn.utils.clip_grad_norm_(params, cfg[mode].grad_clip)
                    optimizer.step()
                    wall[mode].append(time.perf_counter() - t0)
                    cpu[mode].append(time.process_time() - c0)
        med = {mode: statistics.median(wall[mode]) for mode in MODES}
        med_cpu = {mode: statistics.median(cpu[mode]) for mode in MODES}
        diff = float((grads["none"] - grads["packed"]).abs().max() / grads["none"].abs().max())
        steps = cfg["none"].last_step
        for mode in MODES:
            minutes[mode] += steps * med[mode] / 60
        print(f"{number:>5} {steps:>5} {1 - real / padded:>8.1%} {med['none']:>10.3f} ({med_cpu['none']:.3f})"
              f"{'':>2} {med['packed']:>10.3f} ({med_cpu['packed']:.3f}){'':>2} "
              f"{med['none'] / med['packed']:>5.2f}x {diff:>9.1e}")
    print(f"projected chain (steps x median step time, data and probes excluded): padded {minutes['none']:.0f} min, "
          f"packed {minutes['packed']:.0f} min, ratio {minutes['none'] / minutes['packed']:.2f}x")


if __name__ == "__main__":
    main()
