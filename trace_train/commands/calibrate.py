"""``trace-rl calibrate env=<id> [env_kwargs={...}] [search=true]``.

Plays G rollouts x S seeds of the calibration policy (``synthesis.policy``) on a registered env and
reports mean reward, success, reward std, group fractions and pass@k against the gate
(``synthesis.gate``); with ``search=true`` on a family id, searches its difficulty knobs. Writes
``<out>/calibration.json``; exits non-zero when the gate is not met.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

import trace_envs  # noqa: F401  (registers the trace/ ids)
import trace_train.paths
from trace_envs.synthesis import calibrate_env, gate_failures, search_knobs
from trace_envs.synthesis.emit import atomic_write_text
from trace_train.commands._synthesis_common import collector, stats_table, synthesis_config

logger = logging.getLogger(__name__)


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="calibrate", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._validate import check_groups
    from trace_train.commands.rollout import exit_with

    try:
        check_groups(cfg, "synthesis")
        scfg = synthesis_config(cfg)
        if not cfg.search:
            resolve_cfg_envs(cfg, [str(cfg.env)])
    except (TypeError, ValueError) as exc:
        exit_with("calibrate", str(exc))
    rollouts = collector(scfg)
    console = Console()
    env_kwargs = OmegaConf.to_container(cfg.env_kwargs, resolve=True) or {}
    if cfg.search:
        capability = str(cfg.env).removeprefix("trace/").removesuffix("-v0")
        result = search_knobs(capability, scfg, collector=rollouts)
        console.print(stats_table([(capability, t.knobs, t.stats, t.failures) for t in result.trials]))
        doc, passed = result.to_dict(), result.passed
        if not passed:
            closest = result.closest(scfg.gate)
            console.print(f"[red]no difficulty setting of {capability} passes the gate[/red]; closest "
                          f"{closest.knobs}: {closest.failures}")
    else:
        stats = calibrate_env(str(cfg.env), env_kwargs, rollouts, scfg)
        failures = gate_failures(stats, scfg.gate)
        console.print(stats_table([(str(cfg.env), env_kwargs, stats, failures)]))
        doc, passed = {"env": str(cfg.env), "env_kwargs": env_kwargs, "stats": stats.to_dict(),
                       "failures": failures, "passed": not failures}, not failures
    out = Path(to_absolute_path(cfg.out)) / "calibration.json"
    atomic_write_text(out, json.dumps(doc, indent=2) + "\n")
    console.print(f"-> {out}")
    if not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()
