"""``trace-rl calibrate env=<id> ['++env_kwargs={...}'] [search=true]``.

Plays G rollouts x S seeds of the calibration policy (``synthesis.policy``) on a registered env and
reports mean reward, success, reward std, group fractions and pass@k against the gate
(``synthesis.gate``); with ``search=true`` on a family id, searches its difficulty knobs. Writes
``<out>/calibration.json``; exits 1 when the gate is not met. In a ``-m`` sweep a failed gate is
recorded (``passed: false`` in the job's calibration.json) and the sweep goes on to its next job.
Env kwargs: ``'++env_kwargs={refuse_fraction: 0.8}'`` or ``+env_kwargs.refuse_fraction=0.8`` (a plain
``env_kwargs={...}`` cannot add keys to the empty default; Hydra refuses it).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

import trace_envs  # noqa: F401  (registers the trace/ ids)
import trace_train.paths
from trace_envs.synthesis import calibrate_env, search_knobs
from trace_envs.synthesis.calibrate import make_trial
from trace_envs.synthesis.emit import atomic_write_text
from trace_train.commands._synthesis_common import collector, stats_table, synthesis_config

logger = logging.getLogger(__name__)


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="calibrate", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_envs.families import FAMILIES
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._synthesis_common import check_policy
    from trace_train.commands._validate import (
        ConfigError,
        check_bool,
        check_env_kwargs,
        check_groups,
        check_multirun_output,
        env_kwargs_dict,
        in_multirun,
    )
    from trace_train.commands.rollout import exit_with

    try:
        check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}", "its calibration.json")
        search = check_bool(cfg, "search")
        check_groups(cfg, "synthesis")
        scfg = synthesis_config(cfg)
        check_policy(scfg)
        env_kwargs = env_kwargs_dict(cfg.get("env_kwargs"))
        capability = str(cfg.env).removeprefix("trace/").removesuffix("-v0")
        if search:
            if capability not in FAMILIES:
                raise ConfigError(f"search=true needs env=trace/<capability>-v0 of an env family; {cfg.env} has "
                                  f"none (families: {', '.join(sorted(FAMILIES))})")
        else:
            resolve_cfg_envs(cfg, [str(cfg.env)])
            check_env_kwargs([str(cfg.env)], env_kwargs)
        rollouts = collector(scfg)
    except (TypeError, ValueError) as exc:
        exit_with("calibrate", str(exc))
    console = Console()
    if search:
        result = search_knobs(capability, scfg, collector=rollouts)
        console.print(stats_table([(capability, t.knobs, t.stats, t.failures) for t in result.trials]))
        doc, passed = result.to_dict(), result.passed
        if not passed:
            closest = result.closest(scfg.gate)
            console.print(f"[red]no difficulty setting of {capability} passes the gate[/red]; closest "
                          f"{closest.knobs}: {closest.failures}")
    else:
        stats = calibrate_env(str(cfg.env), env_kwargs, rollouts, scfg)
        trial = make_trial(env_kwargs, stats, scfg.gate)
        console.print(stats_table([(str(cfg.env), env_kwargs, stats, trial.failures)]))
        if trial.needs_hints:
            console.print(f"[yellow]passes only with hints[/yellow]: the unhinted members alone miss "
                          f"{'; '.join(trial.unhinted_failures or [])}")
        doc = {"env": str(cfg.env), "env_kwargs": env_kwargs, "stats": stats.to_dict(),
               "failures": trial.failures, "passed": trial.passed, "unhinted_failures": trial.unhinted_failures,
               "needs_hints": trial.needs_hints}
        passed = trial.passed
    out = Path(to_absolute_path(cfg.out)) / "calibration.json"
    atomic_write_text(out, json.dumps(doc, indent=2) + "\n")
    console.print(f"-> {out}")
    if not passed:
        if in_multirun():  # the sweep goes on: this job's calibration.json says passed: false
            logger.warning("calibration gate not met (job recorded in %s); the sweep continues", out)
            console.print(f"[red]gate not met[/red]: recorded in {out}; the sweep continues")
            return
        sys.exit(1)


if __name__ == "__main__":
    main()
