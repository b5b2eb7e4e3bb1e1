"""Does a base model act on each injected deficit at the rate of the expert it was cloned from?

The shipped base is behaviour-cloned from an imperfect expert whose knob k makes it take the wrong action at a
capability's decision with probability k (``bootstrap.json``'s ``config.knobs``). The method needs the base to
*express* each deficit at about that rate: if it never takes the right action, its rollouts hold no successes on
the tasks that need the capability, ER+ rests on noise and the analysis cannot select it (issue #18). For every
capability this plays held-out retail-sim seeds with the expert at the base's knobs (the reference, in the same
run), the base greedy and the base sampled, and prints the rate of right actions among the decisions each reached
(``trace_train.analysis.retail_decisions``) with its 95 % Wilson interval, and the base's rate over the expert's.

    python benchmarks/deficit_expression.py [--model checkpoints/retail-sim-tiny] [--episodes 500]
                                            [--temperature 0.7] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import trace_envs  # noqa: F401  (registers the envs)
from trace_envs.retail_sim import ENV_ID, ExpertKnobs, ScriptedExpert
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB
from trace_train.analysis.retail_decisions import CAPABILITIES, DecisionTally, tally_decisions
from trace_train.evaluation import wilson_interval
from trace_train.paths import REPO_ROOT
from trace_train.pipeline.policy_play import play
from trace_train.policies import PolicySpec
from trace_train.rollout.loop import rollout_requests
from trace_train.rollout.scripted import ScriptedRolloutBackend


def cell(t: DecisionTally) -> str:
    if not t.reached:
        return "–"
    low, high = wilson_interval(t.right, t.reached)
    return f"{t.rate:.2f} [{low:.2f}, {high:.2f}] {t.right}/{t.reached}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "checkpoints" / "retail-sim-tiny"))
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--split", default="test")
    parser.add_argument("--temperature", type=float, default=0.7, help="the sampled base (the analysis' rollouts)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    knobs = json.loads((Path(args.model) / "bootstrap.json").read_text())["config"]["knobs"]
    requests = rollout_requests(ENV_ID, {}, args.split, args.episodes, 0, 1)
    started = time.perf_counter()
    expert = ScriptedRolloutBackend(lambda seed: ScriptedExpert(ExpertKnobs(**knobs), seed=seed, name="expert"))
    runs = {"expert (reference)": expert.rollout(requests)}
    for name, greedy in (("base greedy", True), (f"base T={args.temperature:g}", False)):
        spec = PolicySpec(kind="hf", name=name, model=args.model, temperature=args.temperature, greedy=greedy,
                          threads=args.threads)
        runs[name] = play(spec, ENV_ID, args.split, args.episodes)
    tallies = {name: tally_decisions(records) for name, records in runs.items()}
    print(f"{args.episodes} {args.split} seeds of {ENV_ID}, model {args.model}, "
          f"{time.perf_counter() - started:.0f} s")
    print("right actions among the decisions reached: rate [95 % interval] right/reached")
    names = list(runs)
    print(f"{'capability':28s} {'knob':>5s} " + " ".join(f"{n:>27s}" for n in names) + "  base/expert")
    for cap in CAPABILITIES:
        ref = tallies[names[0]][cap].rate
        ratios = [tallies[n][cap].rate for n in names[1:]]
        ratio = " ".join("–" if r is None or not ref else f"{r / ref:.2f}" for r in ratios)
        cells = " ".join(f"{cell(tallies[n][cap]):>27s}" for n in names)
        print(f"{cap:28s} {knobs[CAPABILITY_TO_KNOB[cap]]:5.2f} {cells}  {ratio}")
    print("success: " + ", ".join(f"{n} {sum(r.success for r in runs[n]) / len(runs[n]):.3f}" for n in names))


if __name__ == "__main__":
    main()
