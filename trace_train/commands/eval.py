"""``trace-rl eval``: compare policies on held-out seeds (pass rate, pass^k, per capability)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from trace_train.paths import CONF_DIR


def policies_from_config(cfg: DictConfig) -> dict:
    from trace_train.commands._validate import check_policy_spec
    from trace_train.policies import PolicySpec

    raw = OmegaConf.to_container(cfg.policies, resolve=True) or {}
    specs = {name: PolicySpec.from_dict({"name": name, **spec}, f"policies.{name}") for name, spec in raw.items()}
    for name, spec in specs.items():
        check_policy_spec(spec, f"policies.{name}")
    return specs


def check_counts(cfg: DictConfig) -> dict[str, int]:
    """Counts as ints (``ValueError`` saying what to set otherwise), and the seeds exist in the split."""
    from trace_train.commands.rollout import check_count, check_seed_range

    counts = {key: check_count(cfg, key, 1) for key in ("episodes", "trials", "batch_episodes", "workers")}
    check_seed_range(cfg.split, counts["episodes"])
    return counts


def checked_policies(cfg: DictConfig) -> dict:
    """The env resolves (``imports``, ``run_dir``, ``module:id``) and each scripted policy can play it,
    all before any model loads; returns the policy specs."""
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.policies import check_policy_env

    resolve_cfg_envs(cfg, [str(cfg.env)])
    policies = policies_from_config(cfg)
    for spec in policies.values():
        check_policy_env(spec, str(cfg.env), OmegaConf.to_container(cfg.env_kwargs, resolve=True))
    return policies


@hydra.main(config_path=str(CONF_DIR), config_name="eval", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.commands.rollout import exit_with

    try:
        counts = check_counts(cfg)
        policies = checked_policies(cfg)
    except ValueError as exc:
        exit_with("eval", str(exc))

    from trace_train.evaluation.run import evaluate_policies, print_comparison

    results = evaluate_policies(policies, cfg.env, cfg.split, counts["episodes"], counts["trials"],
                                OmegaConf.to_container(cfg.env_kwargs), cfg.out_dir, counts["batch_episodes"],
                                workers=counts["workers"])
    print_comparison(results, title=f"{cfg.env}, {cfg.split} split, {cfg.episodes} seeds x {cfg.trials}")
