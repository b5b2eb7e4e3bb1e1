"""``trace-rl expert``: the scripted oracle vs the imperfect expert on held-out seeds, per capability."""

from __future__ import annotations

from omegaconf import DictConfig

from trace_train.commands._app import command_app
from trace_train.commands.eval import check_counts, checked_out_dir, checked_policies


@command_app("expert")
def main(cfg: DictConfig) -> None:
    from trace_train.commands._validate import env_kwargs_dict, remove_stale_results
    from trace_train.commands.rollout import exit_with
    from trace_train.evaluation.run import evaluate_policies, print_comparison

    try:
        counts = check_counts(cfg)
        policies = checked_policies(cfg)
        out, stale = checked_out_dir(cfg, "its eval.json and trajectories")
    except ValueError as exc:
        exit_with("expert", str(exc))
    results = evaluate_policies(policies, cfg.env, cfg.split, counts["episodes"], counts["trials"],
                                env_kwargs_dict(cfg.get("env_kwargs")), out, counts["batch_episodes"],
                                workers=counts["workers"])
    remove_stale_results(stale)  # if_exists=overwrite: no file of the earlier run stays
    print_comparison(results, title=f"scripted policies on {cfg.env}, {cfg.split} split")
