"""``trace-rl expert``: the scripted oracle vs the imperfect expert on held-out seeds, per capability."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from trace_train.commands.eval import policies_from_config
from trace_train.paths import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="expert", version_base=None)
def main(cfg: DictConfig) -> None:
    import trace_envs  # noqa: F401
    from trace_train.evaluation.run import evaluate_policies, print_comparison

    results = evaluate_policies(policies_from_config(cfg), cfg.env, cfg.split, int(cfg.episodes), int(cfg.trials),
                                dict(cfg.env_kwargs), cfg.out_dir, int(cfg.batch_episodes))
    print_comparison(results, title=f"scripted policies on {cfg.env}, {cfg.split} split")
