"""``trace-rl eval``: compare policies on held-out seeds (pass rate, pass^k, per capability).

Writes ``eval.json`` and one ``trajectories_<policy>.jsonl`` per policy into ``out_dir``; an ``out_dir`` that
already holds them is refused unless ``if_exists=overwrite`` (which removes the earlier files first)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from trace_train.commands._app import command_app


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
    from trace_train.commands._validate import check_env_kwargs, env_kwargs_dict
    from trace_train.policies import check_policy_env

    env_kwargs = env_kwargs_dict(cfg.get("env_kwargs"))
    resolve_cfg_envs(cfg, [str(cfg.env)])
    check_env_kwargs([str(cfg.env)], env_kwargs)  # an unknown keyword fails here, not after a model loads
    policies = policies_from_config(cfg)
    if not policies:
        raise ValueError("no policy to evaluate; set policies.<name>={kind: ..., ...}")
    for spec in policies.values():
        check_policy_env(spec, str(cfg.env), env_kwargs)
    return policies


def checked_out_dir(cfg: DictConfig, what: str) -> tuple[Path, list[Path]]:
    """``out_dir`` (per job in a ``-m`` sweep) and the earlier run's result files in it (refused unless
    ``if_exists=overwrite``)."""
    from hydra.utils import to_absolute_path

    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_results_dir
    from trace_train.evaluation.run import result_files

    check_multirun_output(cfg, "out_dir", "${hydra:runtime.output_dir}", what)
    out = Path(to_absolute_path(str(cfg.out_dir)))
    return out, check_results_dir(out, "out_dir", result_files, cfg.get("if_exists"))


@command_app("eval")
def main(cfg: DictConfig) -> None:
    from trace_train.commands._validate import env_kwargs_dict, remove_stale_results
    from trace_train.commands.rollout import exit_with

    try:
        counts = check_counts(cfg)
        policies = checked_policies(cfg)
        out, stale = checked_out_dir(cfg, "its eval.json and trajectories")
    except ValueError as exc:
        exit_with("eval", str(exc))

    from trace_train.evaluation.run import evaluate_policies, print_comparison

    results = evaluate_policies(policies, cfg.env, cfg.split, counts["episodes"], counts["trials"],
                                env_kwargs_dict(cfg.get("env_kwargs")), out, counts["batch_episodes"],
                                workers=counts["workers"])
    remove_stale_results(stale)  # if_exists=overwrite: no file of the earlier run stays
    print_comparison(results, title=f"{cfg.env}, {cfg.split} split, {cfg.episodes} seeds x {cfg.trials}")
