"""The capability families on the τ² domains: oracle on 500 seeds, knob isolation, calibration.

    nice -n 10 .venv/bin/python benchmarks/tau2_families.py --seeds 500 --knob-seeds 50 [--calibrate]
        [--calib-seeds 32 --calib-group 8]   (calibration size; default: conf/synthesis/default.yaml's)

For every (family, domain in tau2-airline, tau2-retail): the oracle must score 1.0 on every seed; each knob
at 1.0 must fail exactly the episodes that need it (precondition: the refusal cases; the others: every task
of their own family) and no other; with ``--calibrate`` the knob search with the scripted expert must land
in the gate [0.2, 0.6]. Prints one line per pair and exits non-zero on any violation.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import yaml

import trace_envs  # noqa: F401
from trace_envs.families import FAMILIES, FamilyExpert, play
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB

KNOBS = ("precondition", "structured", "multi_step", "precision")
DOMAINS = ("tau2-airline", "tau2-retail")
logger = logging.getLogger("tau2_families")


def needs(cap: str, knob: str, task: dict) -> bool:
    if knob != CAPABILITY_TO_KNOB[cap]:
        return False
    return task["case"] != "allow" if cap == "precondition_verification" else True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--knob-seeds", type=int, default=50)
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--calib-seeds", type=int, default=None, help="calibration seeds (default: the config's)")
    parser.add_argument("--calib-group", type=int, default=None, help="calibration group size (default: config's)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    bad = 0
    for domain in DOMAINS:
        for cap in sorted(FAMILIES):
            env = gym.make(f"trace/{cap}-v0", domain=domain)
            start = time.perf_counter()
            fails = [s for s in range(args.seeds) if play(env, FamilyExpert(), s)[0] != 1.0]
            per_ep = (time.perf_counter() - start) / args.seeds
            mismatch = 0
            for knob in KNOBS:
                for seed in range(10_000, 10_000 + args.knob_seeds):
                    reward, info = play(env, FamilyExpert({knob: 1.0}, seed=1), seed)
                    mismatch += (reward < 1.0) != needs(cap, knob, info["task"])
            line = f"{domain:13s} {cap:28s} oracle {args.seeds - len(fails)}/{args.seeds} knob-mismatch {mismatch} " \
                   f"{per_ep * 1000:.0f} ms/episode"
            if args.calibrate:
                from trace_envs.synthesis import SynthesisConfig, search_knobs

                cfg = SynthesisConfig.from_dict(yaml.safe_load(
                    (Path(__file__).resolve().parents[1] / "conf/synthesis/default.yaml").read_text()))
                cfg = replace(cfg, domain=domain, n_seeds=args.calib_seeds or cfg.n_seeds,
                              group_size=args.calib_group or cfg.group_size)
                result = search_knobs(cap, cfg)
                line += f" calibration {'pass' if result.passed else 'FAIL'} ({cfg.n_seeds}x{cfg.group_size})"
                if result.chosen:
                    stats = result.chosen.stats
                    line += (f" at {result.chosen.knobs} (mean {stats.mean_reward:.3f}, success "
                             f"{stats.success_rate:.3f}, all-success {stats.frac_all_success:.2f})")
                bad += not result.passed
            bad += bool(fails) + bool(mismatch)
            logger.info(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
