"""Multirun (``-m``) sweeps of the commands: which jobs a sweep makes, and that every job writes its own outputs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trace_train.commands._validate import ConfigError, _lookup

# --- multirun (``-m``) sweeps: every job must write its own outputs -------------------------------------------------

# interpolations whose value differs between the jobs of one sweep
_PER_JOB_REFS = ("hydra:job.num", "hydra:job.id", "hydra:job.override_dirname", "hydra:runtime.output_dir",
                 "hydra:sweep.subdir", "hydra.job.num", "hydra.job.id", "hydra.job.override_dirname",
                 "hydra.runtime.output_dir", "hydra.sweep.subdir")


def in_multirun() -> bool:
    """Whether this command runs as one job of a Hydra ``-m`` sweep."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    except (ImportError, ValueError):
        return False


# Hydra's own flags that take the next argument as their value (it is not an override)
_FLAGS_WITH_VALUE = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-p", "--package",
                     "--experimental-rerun")


def command_line_overrides(argv: Sequence[str] | None = None) -> list[Any]:
    """The Hydra overrides of the command line (``sys.argv``), parsed (sweeps unexpanded); [] if unparsable."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args, skip = [], False
    for arg in sys.argv[1:] if argv is None else argv:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in _FLAGS_WITH_VALUE
        else:
            args.append(arg)
    try:
        return OverridesParser.create().parse_overrides(args)
    except Exception:  # noqa: BLE001  (Hydra already accepted the command line; fall back to nothing known)
        return []


def sweep_overrides() -> list[Any]:
    """The overrides that make this ``-m`` sweep, parsed: those of ``hydra.sweeper.params`` (a sweep declared in a
    config file), then the command line's (:func:`command_line_overrides`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = HydraConfig.get().sweeper.get("params") or {}
    declared = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return [*declared, *command_line_overrides()]


def sweep_jobs() -> list[list[str]] | None:
    """Each job's overrides, in job order, as Hydra's basic sweeper makes them from :func:`sweep_overrides` (one
    value of each swept key, every combination; a later override of a key replaces an earlier one); ``None`` with
    another sweeper or a sweep it cannot expand (a range of floats, say): the jobs are then known only as they
    start."""
    import itertools

    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.types import Glob

    if not str(HydraConfig.get().sweeper.get("_target_", "")).endswith(".BasicSweeper"):
        return None
    choices: dict[str, list[str]] = {}
    for override in sweep_overrides():
        key = override.get_key_element()
        if key.lstrip("+~").startswith("hydra.") or key.lstrip("+~").startswith("hydra/"):
            continue  # Hydra's own settings: the same for every job
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep() and not isinstance(override.value(), Glob):
            try:
                choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            except Exception:  # noqa: BLE001  (a sweep Hydra expands only with its config loader)
                return None
        else:
            return None  # a glob over a config group, a range, an interval: known only as the jobs start
    return [list(job) for job in itertools.product(*choices.values())]


def _raw_value(cfg: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    return _lookup(OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg, key)


def _yaml_value(path: Path, key: str) -> Any:
    import yaml

    return _lookup(yaml.safe_load(path.read_text(encoding="utf-8")) or {}, key)


def _group_sets_per_job(group: str, options: list[str], key: str) -> bool:
    """Whether the options of a swept config group give ``key`` a value of its own each: the option's, or the
    command's primary config's where the option does not set it (``preset=smoke,quick`` gives ``runs/smoke`` and
    the default ``runs/quick``; ``grpo=default,paper`` leaves every job the one default)."""
    from hydra.core.hydra_config import HydraConfig

    from trace_train.paths import CONF_DIR

    primary = CONF_DIR / f"{HydraConfig.get().job.config_name}.yaml"
    default = _yaml_value(primary, key) if primary.is_file() else None
    values = []
    for option in options:
        path = CONF_DIR / group / f"{option}.yaml"
        if not path.is_file():
            return False
        parts = key.split(".")
        if "@package _global_" not in path.read_text(encoding="utf-8").split("\n", 1)[0]:
            if parts[0] != group:  # the option's keys live under its group: it cannot set this key
                values.append(default)
                continue
            parts = parts[1:]
        value = _yaml_value(path, ".".join(parts))
        values.append(default if value is None else value)
    return None not in values and len({str(v) for v in values}) == len(values)


def check_multirun_output(cfg: Any, key: str, example: str, what: str = "its outputs") -> None:
    """In a ``-m`` sweep of several jobs, :class:`ConfigError` unless ``key`` (an output location) differs per job:
    the key is swept itself, its value interpolates a per-job value (``${hydra:job.num}``, the job's own
    ``${hydra:runtime.output_dir}``, a swept key or ``${hydra:runtime.choices.<swept group>}``), or (not set on the
    command line) every option of a swept config group such as ``preset`` sets it to its own value. Otherwise
    every job would write ``what`` into one place, each replacing the one before."""
    import re

    if not in_multirun():
        return
    overrides = sweep_overrides()
    sweeps = [o for o in overrides if o.is_sweep_override()]
    if not sweeps:
        return  # one job
    swept = {str(o.key_or_group) for o in sweeps}
    if key in swept:
        return
    raw = _raw_value(cfg, key)
    refs = [r.strip() for r in re.findall(r"\$\{([^}]*)\}", str(raw))] if isinstance(raw, str) else []
    per_job = {*_PER_JOB_REFS, *swept, *(f"hydra:runtime.choices.{g}" for g in swept)}
    if any(ref in per_job for ref in refs):
        return
    given = {str(o.key_or_group) for o in overrides if not o.is_sweep_override()}
    if key not in given and any("." not in str(o.key_or_group) and _group_sets_per_job(
            str(o.key_or_group), list(o.sweep_string_iterator()), key) for o in sweeps):
        return
    value = _lookup(cfg, key)
    value = "null" if value is None else value
    raise ConfigError(f"{key}={value} is the same for every job of this -m sweep: each job would replace "
                      f"{what} of the one before; sweep {key} itself or make it per job, e.g. '{key}={example}'")
