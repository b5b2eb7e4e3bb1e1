"""Kill-and-resume of ``trace-rl train``: is a run killed with SIGKILL and resumed identical to one that was not?

Usage:
    python benchmarks/kill_resume.py [--trials 3] [--iterations 6] [--every 2] [--seed 0] [--out DIR]

Runs a tiny GRPO training (the shipped base on ``trace/precondition_verification-v0``, one torch
thread) to completion as the reference. Then, per trial, runs it again, SIGKILLs it at a seeded random
moment (trial 0: after iteration 0 is logged, before the first checkpoint; the others: a random
iteration, a random fraction into it), resumes it with ``resume=true``, and compares with the
reference: every adapter file byte for byte, ``metrics.jsonl`` row for row (each iteration exactly
once; wall-clock fields ignored), ``seeds.jsonl`` and the per-iteration rollout files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trace_train.paths import shipped_checkpoint

ENV = "trace/precondition_verification-v0"
ADAPTER = "kr"


def _timing(key: str) -> bool:
    return key.startswith("time_") or key.endswith("_per_s")


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by the kill
            pass
    return rows


def _command(args: argparse.Namespace, run: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "trace_train.cli", "train", f"env={ENV}", f"adapter={ADAPTER}",
            f"tiny_policy_dir={args.base}", f"output_dir={run}", f"hydra.run.dir={run}_hydra",
            f"grpo.iterations={args.iterations}", f"grpo.checkpoint_every={args.every}",
            f"grpo.groups_per_iter={args.groups}", f"grpo.group_size={args.group_size}", "grpo.lr=5e-4",
            "grpo.threads=1", "grpo.tensorboard=false", "grpo.progress=false", f"resume={str(resume).lower()}"]


def _start(args: argparse.Namespace, run: Path, resume: bool, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if args.hash_seed is not None:
        env["PYTHONHASHSEED"] = str(args.hash_seed)
    with open(log, "a") as fh:
        return subprocess.Popen(_command(args, run, resume), stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def reference(args: argparse.Namespace, run: Path) -> tuple[float, float]:
    """Train to completion; returns (wall seconds, mean seconds per iteration)."""
    start = time.time()
    process = _start(args, run, False, run.with_suffix(".log"))
    seen: list[float] = []
    while process.poll() is None:
        rows = len(_rows(run / "metrics.jsonl"))
        while len(seen) < rows:
            seen.append(time.time())
        time.sleep(0.05)
    if process.returncode:
        raise SystemExit(f"reference run failed ({process.returncode}); see {run.with_suffix('.log')}")
    per_iteration = (seen[-1] - seen[0]) / max(len(seen) - 1, 1) if len(seen) > 1 else 1.0
    return time.time() - start, per_iteration


@dataclass
class Trial:
    trial: int
    killed_s: float | None = None
    in_iteration: int | None = None  # the iteration running when the kill landed
    checkpoint: int | None = None  # the last checkpoint written before the kill
    resumed: str = ""
    weights_identical: bool | None = None  # every adapter_model.safetensors, byte for byte
    config_identical: str = "-"  # adapter_config.json: yes | "order" (same JSON up to list order) | NO
    metrics_identical: bool | None = None
    seeds_identical: bool | None = None
    rollouts_identical: bool | None = None
    note: str = ""


def _latest(run: Path) -> int | None:
    pointer = run / "checkpoints" / "latest.json"
    try:
        return int(json.loads(pointer.read_text())["iteration"])
    except (OSError, ValueError, KeyError):
        return None


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.exists() else {}


def _sorted_lists(value):
    if isinstance(value, dict):
        return {k: _sorted_lists(v) for k, v in value.items()}
    return sorted(map(str, value)) if isinstance(value, list) else value


def _config_verdict(ref: dict[str, bytes], run: dict[str, bytes]) -> str:
    names = sorted(k for k in set(ref) | set(run) if k.endswith("adapter_config.json"))
    if not names or any(k not in ref or k not in run for k in names):
        return "NO"
    if all(ref[k] == run[k] for k in names):
        return "yes"
    same = all(_sorted_lists(json.loads(ref[k])) == _sorted_lists(json.loads(run[k])) for k in names)
    return "order" if same else "NO"


def compare(trial: Trial, ref: Path, run: Path) -> None:
    ref_adapters, adapters = _tree(ref / "adapters"), _tree(run / "adapters")
    weights = sorted(k for k in set(ref_adapters) | set(adapters) if not k.endswith("adapter_config.json"))
    trial.weights_identical = bool(weights) and all(ref_adapters.get(k) == adapters.get(k) for k in weights)
    trial.config_identical = _config_verdict(ref_adapters, adapters)
    ref_rows, rows = _rows(ref / "metrics.jsonl"), _rows(run / "metrics.jsonl")
    iterations = [r.get("iteration") for r in rows]

    def strip(r: dict) -> dict:
        return {k: v for k, v in r.items() if not _timing(k)}

    trial.metrics_identical = [strip(r) for r in ref_rows] == [strip(r) for r in rows]
    trial.seeds_identical = _rows(ref / "seeds.jsonl") == _rows(run / "seeds.jsonl")
    trial.rollouts_identical = _tree(ref / "rollouts") == _tree(run / "rollouts")
    notes = []
    if iterations != [r.get("iteration") for r in ref_rows]:
        notes.append(f"metrics iterations {iterations}")
    if not trial.weights_identical:
        differ = [k for k in weights if ref_adapters.get(k) != adapters.get(k)]
        notes.append(f"adapter files differ: {differ[:3]}")
    trial.note = "; ".join(notes)


def run_trial(args: argparse.Namespace, out: Path, ref: Path, number: int, per_iteration: float) -> Trial:
    rng = random.Random(args.seed * 1000 + number)
    if number == 0:  # after iteration 0 is logged, well before the first checkpoint (after iteration `every`)
        after_rows, fraction = 1, rng.uniform(0.1, 0.5)
    else:
        after_rows, fraction = rng.randint(1, args.iterations - 1), rng.uniform(0.0, 1.0)
    run = out / f"trial{number}"
    log = run.with_suffix(".log")
    trial = Trial(number)
    start = time.time()
    process = _start(args, run, False, log)
    while process.poll() is None and len(_rows(run / "metrics.jsonl")) < after_rows:
        time.sleep(0.02)
    deadline = time.time() + fraction * per_iteration
    while process.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        trial.killed_s = time.time() - start
        trial.in_iteration = len(_rows(run / "metrics.jsonl"))
        trial.checkpoint = _latest(run)
    else:
        trial.note = "finished before the kill"
    resumed = _start(args, run, True, log)
    resumed.wait()
    trial.resumed = "ok" if resumed.returncode == 0 else f"exit {resumed.returncode}"
    compare(trial, ref, run)
    if resumed.returncode:
        trial.note = f"{trial.note}; see {log}".lstrip("; ")
    return trial


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--every", type=int, default=2, help="checkpoint every N iterations")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    parser.add_argument("--hash-seed", type=int, default=None,
                        help="PYTHONHASHSEED for every run (default: Python's random per process, as in real use)")
    parser.add_argument("--base", default=str(shipped_checkpoint()))
    parser.add_argument("--out", default="runs/kill_resume")
    args = parser.parse_args()
    if args.trials < 1 or args.iterations < 2 or not 1 <= args.every <= args.iterations:
        raise SystemExit("need --trials >= 1, --iterations >= 2 and 1 <= --every <= --iterations")
    args.base = str(Path(args.base).resolve())
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    wall, per_iteration = reference(args, out / "reference")
    print(f"reference: {args.iterations} iterations ({args.groups} groups x {args.group_size}, checkpoint every "
          f"{args.every}) in {wall:.1f} s, {per_iteration:.2f} s per iteration")
    trials = [run_trial(args, out, out / "reference", n, per_iteration) for n in range(args.trials)]
    print(f"{'trial':>5} {'killed at (s / iteration)':>26} {'resumed':>8} {'weights identical':>18} "
          f"{'config identical':>17} {'metrics rows identical':>23} {'seeds identical':>16} "
          f"{'rollouts identical':>19}  note")
    for t in trials:
        killed = "-" if t.killed_s is None else (
            f"{t.killed_s:5.1f} s / it {t.in_iteration} (ckpt {t.checkpoint if t.checkpoint is not None else '-'})")
        print(f"{t.trial:>5} {killed:>26} {t.resumed:>8} {_yes(t.weights_identical):>18} {t.config_identical:>17} "
              f"{_yes(t.metrics_identical):>23} {_yes(t.seeds_identical):>16} {_yes(t.rollouts_identical):>19}  "
              f"{t.note}")
    same = [t for t in trials if t.weights_identical and t.metrics_identical and t.seeds_identical]
    exact = sum(t.config_identical == "yes" for t in same)
    print(f"{exact}/{len(trials)} trials byte-identical to the reference in every adapter file, metrics and seeds "
          f"row; {len(same)}/{len(trials)} with identical weights and rows (adapter_config.json list order aside); "
          f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
