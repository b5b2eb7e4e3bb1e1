"""``trace-rl calibrate env=<id> ['++env_kwargs={...}'] [search=true]``.

Plays G rollouts x S seeds of the calibration policy (``synthesis.policy``) on a registered env and
reports mean reward, success, reward std, group fractions and pass@k against the gate
(``synthesis.gate``); with ``search=true`` on a family id, searches its difficulty knobs (each candidate with
``env_kwargs`` beside its knobs). Writes ``<out>/calibration.json``; exits 1 when the gate is not met. In a ``-m``
sweep a failed gate is recorded (``passed: false`` in the job's calibration.json), the sweep goes on to its next
job, and the command exits non-zero at the end, naming the jobs that failed.
Env kwargs: ``'++env_kwargs={refuse_fraction: 0.8}'`` or ``+env_kwargs.refuse_fraction=0.8`` (a plain
``env_kwargs={...}`` cannot add keys to the empty default; Hydra refuses it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

import trace_envs  # noqa: F401  (registers the trace/ ids)
from trace_envs.synthesis import SynthesisConfig, calibrate_env, search_knobs
from trace_envs.synthesis.calibrate import check_search_kwargs, make_trial
from trace_envs.synthesis.emit import atomic_write_text
from trace_train.commands._app import command_app
from trace_train.commands._synthesis_common import collector, stats_table, synthesis_config

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checked:
    """The settings of one calibration, checked (no model loaded, nothing written)."""

    search: bool
    synthesis: SynthesisConfig
    env_kwargs: dict[str, Any]
    capability: str


def check_values(cfg: DictConfig) -> Checked:
    """Every value of the command that can be checked before a model loads (``ValueError`` / ``TypeError`` saying
    what to set); in a ``-m`` sweep, run on every job's config before the first job."""
    from trace_envs.families import FAMILIES
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._synthesis_common import check_policy
    from trace_train.commands._validate import ConfigError, check_bool, check_env_kwargs, check_groups, env_kwargs_dict

    check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}", "its calibration.json")
    search = check_bool(cfg, "search")
    check_groups(cfg, "synthesis")
    scfg = synthesis_config(cfg)
    check_policy(scfg)
    env_kwargs = env_kwargs_dict(cfg.get("env_kwargs"))
    capability = str(cfg.env).removeprefix("trace/").removesuffix("-v0")
    if search and capability not in FAMILIES:
        raise ConfigError(f"search=true needs env=trace/<capability>-v0 of an env family; {cfg.env} has "
                          f"none (families: {', '.join(sorted(FAMILIES))})")
    resolve_cfg_envs(cfg, [str(cfg.env)])  # imports= and run_dir= first: they may register the env or its domain
    check_env_kwargs([str(cfg.env)], env_kwargs)
    if search:
        check_search_kwargs(capability, scfg, env_kwargs)
    return Checked(search, scfg, env_kwargs, capability)


@command_app("calibrate", check=check_values)
def main(cfg: DictConfig) -> None:
    from trace_train.commands._validate import CommandExit
    from trace_train.commands.rollout import exit_with

    try:
        checked = check_values(cfg)
        scfg, env_kwargs = checked.synthesis, checked.env_kwargs
        rollouts = collector(scfg)
    except (TypeError, ValueError) as exc:
        exit_with("calibrate", str(exc))
    console = Console()
    if checked.search:
        result = search_knobs(checked.capability, scfg, collector=rollouts, env_kwargs=env_kwargs)
        console.print(stats_table([(checked.capability, t.knobs, t.stats, t.failures) for t in result.trials]))
        doc, passed = {**result.to_dict(), "env_kwargs": env_kwargs}, result.passed
        if not passed:
            closest = result.closest(scfg.gate)
            console.print(f"[red]no difficulty setting of {checked.capability} passes the gate[/red]; closest "
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
    if not passed:  # exit 1; in a -m sweep the next job runs and the command names the failed ones at the end
        console.print(f"[red]gate not met[/red]: recorded in {out}")
        raise CommandExit(1, f"calibration gate not met (recorded in {out})")


if __name__ == "__main__":
    main()
