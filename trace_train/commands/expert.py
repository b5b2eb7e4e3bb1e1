"""``trace-rl expert``: the scripted oracle vs the imperfect expert on held-out seeds, per capability."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from trace_train.commands.eval import check_counts, checked_policies
from trace_train.paths import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="expert", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.commands.rollout import exit_with
    from trace_train.evaluation.run import evaluate_policies, print_comparison

    try:
        counts = check_counts(cfg)
        policies = checked_policies(cfg)
    except ValueError as exc:
        exit_with("expert", str(exc))
    results = evaluate_policies(policies, cfg.env, cfg.split, counts["episodes"], counts["trials"],
                                dict(cfg.env_kwargs), cfg.out_dir, counts["batch_episodes"], workers=counts["workers"])
    print_comparison(results, title=f"scripted policies on {cfg.env}, {cfg.split} split")
