"""``pipeline.workers``: the same independent pipeline work in one process on N threads vs in N one-thread workers.

Two kinds of work, each as the pipeline runs it, on the shipped base and trace/retail-sim-v0:

* evaluation: ``--policies`` policies x ``--episodes`` held-out seeds, greedy (``evaluate_policies``);
* training: ``--runs`` GRPO runs of ``--iterations`` iterations (8 groups x 8, the quick preset's update: two
  mini-batches, two passes, T = 0.7), each with its own run seed (``grpo_run``, as a pipeline stage trains).

Each is timed sequentially with ``--threads`` torch threads (what ``pipeline.workers: 1`` does with
``pipeline.policy.threads: 2``) and then with ``run_jobs(..., workers=--workers)``, in this one process, and the
ratio printed (> 1: the workers finish sooner). The two modes play the same seeds; their results can differ in the
last bits (one thread vs two), so the success rates are printed beside the times.

    .venv/bin/python benchmarks/pipeline_workers.py [--episodes 250] [--policies 4] [--runs 2] [--iterations 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _eval_jobs(args, out: Path):
    from trace_train.evaluation.run import evaluate_policies
    from trace_train.paths import shipped_checkpoint
    from trace_train.policies import PolicySpec

    base = str(shipped_checkpoint("retail-sim-tiny"))
    policies = {f"base#{i}": PolicySpec(kind="hf", model=base, name=f"base#{i}", greedy=True, threads=args.threads)
                for i in range(args.policies)}

    def run(workers: int, tag: str) -> dict:
        return evaluate_policies(policies, "trace/retail-sim-v0", "test", args.episodes, out_dir=out / tag,
                                 batch=32, workers=workers)
    return run


def _train_jobs(args, out: Path):
    from trace_train.grpo.config import GRPOConfig
    from trace_train.paths import shipped_checkpoint
    from trace_train.pipeline.config import PipelineConfig
    from trace_train.pipeline.stages import grpo_run
    from trace_train.workers import Job, run_jobs

    base = str(shipped_checkpoint("retail-sim-tiny"))
    grpo = GRPOConfig(groups_per_iter=8, group_size=8, lr=5e-4, mini_batches=2, ppo_epochs=2, micro_batch_size=8,
                      temperature=0.7, checkpoint_every=args.iterations, threads=args.threads, tensorboard=False,
                      progress=False)

    def run(workers: int, tag: str) -> dict:
        jobs = [Job(f"run{seed}", lambda _, seed=seed: grpo_run(PipelineConfig(), replace(grpo, seed=seed), base,
                                                                "trace/retail-sim-v0", f"run{seed}",
                                                                out / tag / f"run{seed}", args.iterations))
                for seed in range(args.runs)]
        return run_jobs(jobs, workers)
    return run


def _timed(fn, workers: int, tag: str) -> tuple[float, dict]:
    start = time.perf_counter()
    result = fn(workers, tag)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=250)
    parser.add_argument("--policies", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the sequential reference")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    import torch

    import trace_envs  # noqa: F401

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        evaluate, train = _eval_jobs(args, out), _train_jobs(args, out)
        rows = []
        t_seq, r_seq = _timed(evaluate, 1, "eval_seq")
        t_par, r_par = _timed(evaluate, args.workers, "eval_par")
        n = args.policies * args.episodes
        rows.append(("evaluation", f"{args.policies} policies x {args.episodes} seeds", t_seq, t_par, n,
                     [r["overall"]["rate"] for r in r_seq.values()], [r["overall"]["rate"] for r in r_par.values()]))
        t_seq, r_seq = _timed(train, 1, "train_seq")
        t_par, r_par = _timed(train, args.workers, "train_par")
        n = args.runs * args.iterations * 64
        rows.append(("GRPO training", f"{args.runs} runs x {args.iterations} iterations x 64", t_seq, t_par, n,
                     [], []))
    print(f"pipeline.workers: sequential on {args.threads} threads vs {args.workers} one-thread workers "
          f"({torch.__version__}, {Path('/proc/cpuinfo').read_text().count('processor')} CPUs)")
    for kind, size, seq, par, n, rates_seq, rates_par in rows:
        print(f"{kind:>14}  {size:<34} sequential {seq:7.1f} s ({n / seq:6.1f} episodes/s)   "
              f"workers {par:7.1f} s ({n / par:6.1f} episodes/s)   ratio {seq / par:.2f}x")
        if rates_seq:
            print(f"{'':>14}  success sequential {rates_seq}  workers {rates_par}")


if __name__ == "__main__":
    main()
