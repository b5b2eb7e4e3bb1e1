"""``trace-rl eval``: compare policies on held-out seeds (pass rate, pass^k, per capability)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from trace_train.paths import CONF_DIR


def policies_from_config(cfg: DictConfig) -> dict:
    from trace_train.policies import PolicySpec

    raw = OmegaConf.to_container(cfg.policies, resolve=True)
    return {name: PolicySpec.from_dict({"name": name, **spec}) for name, spec in raw.items()}


def check_counts(cfg: DictConfig) -> dict[str, int]:
    """Counts as ints (``ValueError`` saying what to set otherwise), and the seeds exist in the split."""
    from trace_train.commands.rollout import check_count, check_seed_range

    counts = {key: check_count(cfg, key, 1) for key in ("episodes", "trials", "batch_episodes")}
    check_seed_range(cfg.split, counts["episodes"])
    return counts


@hydra.main(config_path=str(CONF_DIR), config_name="eval", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.commands.rollout import exit_with

    try:
        counts = check_counts(cfg)
    except ValueError as exc:
        exit_with("eval", str(exc))

    import trace_envs  # noqa: F401
    from trace_train.evaluation.run import evaluate_policies, print_comparison

    results = evaluate_policies(policies_from_config(cfg), cfg.env, cfg.split, counts["episodes"], counts["trials"],
                                OmegaConf.to_container(cfg.env_kwargs), cfg.out_dir, counts["batch_episodes"])
    print_comparison(results, title=f"{cfg.env}, {cfg.split} split, {cfg.episodes} seeds x {cfg.trials}")
