"""``trace-rl rollout``: play a policy on a registered env; write trajectories.jsonl.

Everything that can be checked (counts, offsets, env id, seed range, the output file) is checked
before a model or env loads. Each finished batch is validated and appended to ``<out>.partial`` as it
completes, which becomes ``out`` atomically at the end (``trace_train.rollout.partial_output``), all
under an exclusive lock on ``<out>.lock`` held for the whole run; an existing ``out`` is refused unless
``if_exists`` says to append to it or overwrite it. A run that fails keeps its finished episodes in
``<out>.partial``; ``resume=true`` (same settings) plays the rest. A record that fails validation is
left out on its own: the others are written, and the command names it and exits 2; so it does (after
writing) when an episode's first prompt did not fit the model's context.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NoReturn

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import track

from trace_train.commands._app import command_app
from trace_train.rollout.loop import (  # noqa: F401  (re-exported for the other commands)
    IF_EXISTS,
    check_count,
    check_existing_output,
    check_seed_range,
    rollout_requests,
    run_rollouts,
    warn_duplicates,
)

logger = logging.getLogger(__name__)


def exit_with(command: str, message: str) -> NoReturn:
    """Print one line ``trace-rl <command>: <message>`` to stderr and exit with status 2; a Hydra run dir
    that holds nothing but Hydra's own files is removed (no empty ``outputs/`` folder is left behind)."""
    from trace_train.commands._validate import fail

    fail(command, message)


# policy fields that do not change what is played (where it runs, how fast): a resume may change them
_RUN_ONLY_POLICY_FIELDS = ("base_urls", "server", "threads", "max_batch")


def _checked(cfg: DictConfig) -> tuple[dict[str, int], str, list, Any, dict[str, Any]]:
    """Validate all that needs no model and no env instance; returns (counts, if_exists, requests, policy spec,
    the settings a resume must repeat)."""
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_env_kwargs, check_policy_spec, env_kwargs_dict
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
    if not isinstance(cfg.get("resume"), bool):
        raise ValueError(f"resume must be true or false, got {cfg.get('resume')!r}")
    policy = {k: v for k, v in spec.hash_part().items() if k not in _RUN_ONLY_POLICY_FIELDS}
    settings = {"env": str(cfg.env), "env_kwargs": env_kwargs, "split": str(cfg.split), **counts,
                "if_exists": if_exists, "policy": policy}
    settings.pop("batch_episodes")  # episodes do not depend on the batch they are played in
    return counts, if_exists, requests, spec, settings


def _kept(output: Any) -> str:
    """What a run that stops early leaves for ``resume=true`` ('' when nothing)."""
    if not output.written:
        return ""
    return (f"; {output.written} finished episodes are kept in {output.partial}: the same command with resume=true "
            f"out={output.out} plays the rest")


def _not_written(output: Any, played: int) -> str:
    """The one-line message for records that failed validation."""
    shown = "; ".join(f"{r.reason}" for r in output.rejected[:3])
    more = f"; and {len(output.rejected) - 3} more (see the log)" if len(output.rejected) > 3 else ""
    return (f"{len(output.rejected)} of {played} episodes were not written (invalid records): {shown}{more}; "
            f"the other {output.written} are in {output.out}")


@command_app("rollout")
def main(cfg: DictConfig) -> None:
    from trace_envs.llm_http import ServerError
    from trace_envs.records import OutputBusyError, exclusive_output
    from trace_train.evaluation import summarize
    from trace_train.model import PolicyLoadError
    from trace_train.policies import build_backend
    from trace_train.rollout.base import prompt_did_not_fit
    from trace_train.rollout.partial_output import PartialOutput, episode_key

    try:
        counts, if_exists, requests, spec, settings = _checked(cfg)
    except ValueError as exc:
        exit_with("rollout", str(exc))
    out = Path(to_absolute_path(str(cfg.out)))
    output = PartialOutput(out, settings)
    try:
        with exclusive_output(out):  # held until the file is written: a second run on out fails at once
            try:
                before = check_existing_output(out, if_exists)
                done = {episode_key(r) for r in output.start(bool(cfg.resume))}
            except ValueError as exc:  # includes RecordError: a bad line of the file to append to
                exit_with("rollout", str(exc))
            todo = [r for r in requests if (r.env_id, r.seed, r.sample_seed) not in done]
            try:
                backend, adapter = build_backend(spec)
                run_rollouts(backend, todo, spec.sampling, adapter, counts["batch_episodes"], progress=track,
                             on_batch=output.append)
            except (ValueError, ServerError, PolicyLoadError) as exc:  # ValueError: e.g. a router without descriptions
                exit_with("rollout", f"{exc}{_kept(output)}")
            except KeyboardInterrupt:
                if output.written:
                    logger.warning("interrupted%s", _kept(output))
                raise
            records = output.records()
            output.finish(append=if_exists == "append")
            if before:
                warn_duplicates(out)
    except OutputBusyError as exc:
        exit_with("rollout", str(exc))
    if output.rejected:
        exit_with("rollout", _not_written(output, len(requests)))
    unfit = [r for r in records if prompt_did_not_fit(r)]
    if unfit:  # written (nothing is lost), but these episodes never reached the policy
        exit_with("rollout", f"{len(unfit)} of {len(records)} episodes ended before their first turn: their first "
                             f"prompt ({max(len(r.token_ids or []) for r in unfit)} tokens at most, e.g. "
                             f"{unfit[0].env_id} seed {unfit[0].seed}) does not fit the context of "
                             f"{getattr(backend, 'max_context', '?')} tokens; raise it (the server's --max-model-len, "
                             f"the model's max_position_embeddings) or shorten the prompt (policy.render_tools=false, "
                             f"a shorter policy.system_suffix); all {len(records)} are in {out}")
    summary = summarize(records, policy=spec.name)
    added = f" (appended to {before})" if before else ""
    Console().print(f"{len(records)} episodes{added} of {spec.name} on {cfg.env}: success "
                    f"{summary.overall.rate:.3f}, mean reward {summary.mean_reward:.3f} -> {out}")
