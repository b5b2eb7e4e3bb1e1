"""``trace-rl rollout``: play a policy on a registered env; write trajectories.jsonl.

Everything that can be checked (counts, offsets, env id, seed range, the output file) is checked
before a model or env loads. The output is written atomically at the end, under an exclusive lock
on ``<out>.lock`` held for the whole run; an existing ``out`` is refused unless ``if_exists`` says
to append to it or overwrite it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import track

from trace_train.paths import CONF_DIR
from trace_train.rollout.loop import (  # noqa: F401  (re-exported for the other commands)
    IF_EXISTS,
    check_count,
    check_existing_output,
    check_seed_range,
    rollout_requests,
    run_rollouts,
    warn_duplicates,
    write_output,
)

logger = logging.getLogger(__name__)


def exit_with(command: str, message: str) -> NoReturn:
    """Print one line ``trace-rl <command>: <message>`` to stderr and exit with status 2; a Hydra run dir
    that holds nothing but Hydra's own files is removed (no empty ``outputs/`` folder is left behind)."""
    from trace_train.commands._validate import fail

    fail(command, message)


def _checked(cfg: DictConfig) -> tuple[dict[str, int], str, list, Any]:
    """Validate all that needs no model and no env instance; returns (counts, if_exists, requests, policy spec)."""
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._validate import (
        check_env_kwargs,
        check_multirun_output,
        check_policy_spec,
        env_kwargs_dict,
    )
    from trace_train.policies import PolicySpec, check_policy_env

    check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}/trajectories.jsonl", "its trajectories")
    counts = {"episodes": check_count(cfg, "episodes", 1), "offset": check_count(cfg, "offset", 0),
              "group_size": check_count(cfg, "group_size", 1), "batch_episodes": check_count(cfg, "batch_episodes", 1)}
    if_exists = cfg.get("if_exists")
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {', '.join(IF_EXISTS)}, got {if_exists!r}")
    resolve_cfg_envs(cfg, [str(cfg.env)])
    check_seed_range(cfg.split, counts["episodes"], counts["offset"])
    env_kwargs = env_kwargs_dict(cfg.get("env_kwargs"))
    check_env_kwargs([str(cfg.env)], env_kwargs)
    requests = rollout_requests(cfg.env, env_kwargs, cfg.split, counts["episodes"],
                                counts["offset"], counts["group_size"])
    spec = PolicySpec.from_dict(OmegaConf.to_container(cfg.policy, resolve=True))
    check_policy_spec(spec, "policy")
    check_policy_env(spec, str(cfg.env), env_kwargs)
    return counts, if_exists, requests, spec


@hydra.main(config_path=str(CONF_DIR), config_name="rollout", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_envs.records import OutputBusyError, exclusive_output
    from trace_train.evaluation import summarize
    from trace_train.policies import build_backend

    try:
        counts, if_exists, requests, spec = _checked(cfg)
    except ValueError as exc:
        exit_with("rollout", str(exc))
    out = Path(to_absolute_path(str(cfg.out)))
    try:
        with exclusive_output(out):  # held until the file is written: a second run on out fails at once
            try:
                before = check_existing_output(out, if_exists)
            except ValueError as exc:  # includes RecordError: a bad line of the file to append to
                exit_with("rollout", str(exc))
            try:
                backend, adapter = build_backend(spec)
            except ValueError as exc:  # e.g. a task router over adapters without descriptions
                exit_with("rollout", str(exc))
            records = run_rollouts(backend, requests, spec.sampling, adapter, counts["batch_episodes"],
                                   progress=track)
            write_output(out, records, if_exists)
            if before:
                warn_duplicates(out)
    except OutputBusyError as exc:
        exit_with("rollout", str(exc))
    summary = summarize(records, policy=spec.name)
    added = f" (appended to {before})" if before else ""
    Console().print(f"{len(records)} episodes{added} of {spec.name} on {cfg.env}: success "
                    f"{summary.overall.rate:.3f}, mean reward {summary.mean_reward:.3f} -> {out}")
