"""Does a base model represent each capability's decision? Fresh linear probes on its hidden states.

Fits one logistic regression per decision (``trace_train.bootstrap.decisions``: precondition, multi_step,
structured, precision) on the final hidden states at the decision points of train-split expert episodes
and prints held-out accuracy and balanced accuracy (chance 0.5) on test-split ones. The probe weighs both
labels equally (the estimator for balanced accuracy); the unweighted probe's figure is printed beside it. Target of the
embedded default's base: >= 0.8 held-out for every decision. A second table gives the balanced probe's accuracy on
each case group (precondition by request kind and order status, precision by kind), where an overall figure can hide
a case read at chance.

    python benchmarks/decision_probes.py [--model checkpoints/retail-sim-tiny] [--train 1500] [--test 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.linear_probe import linear_probes
from trace_train.model import load_policy
from trace_train.paths import REPO_ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "checkpoints" / "retail-sim-tiny"))
    parser.add_argument("--train", type=int, default=1500, help="train-split expert episodes to fit on")
    parser.add_argument("--test", type=int, default=200, help="test-split expert episodes to score on")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model)
    summary = json.loads((model_dir / "bootstrap.json").read_text())
    config = BootstrapConfig.from_dict(summary["config"])  # the knobs the base was cloned from
    model, tokenizer = load_policy(model_dir)
    started = time.perf_counter()
    probes = linear_probes(model, tokenizer, config, args.train, args.test)
    print(f"model {model_dir} (bootstrap {summary.get('config_hash')}), expert knobs {vars(config.knobs)}")
    print("| decision | held-out points | positive share | accuracy | balanced accuracy | >= 0.8 | "
          "unweighted probe's balanced accuracy |")
    print("|---|---|---|---|---|---|---|")
    for decision, s in probes.items():
        ok = "met" if s["balanced_accuracy"] >= 0.8 else "not met"
        print(f"| {decision} | {s['points']} | {s['positive_share']:.2f} | {s['accuracy']:.3f} | "
              f"{s['balanced_accuracy']:.3f} | {ok} | {s['unweighted_balanced_accuracy']:.3f} |")
    print("\n| decision | case | held-out points | accuracy |")
    print("|---|---|---|---|")
    for decision, s in probes.items():
        for case, accuracy in s.get("accuracy_by_case", {}).items():
            print(f"| {decision} | {case} | {s['points_by_case'][case]} | {accuracy:.3f} |")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
