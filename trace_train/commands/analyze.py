"""``trace-rl analyze trajectories=<jsonl> labeler=programmatic|llm out=<dir>``.

Contrastive capability analysis (paper §2): label every (trajectory, capability) pair in N runs,
aggregate Cov / Δ per run, keep capabilities that pass ≥ K runs; writes
``<out>/selected_capabilities.json`` and ``<out>/labels/run_XX.json``; an ``out`` that already holds them is
refused unless ``if_exists=overwrite`` (which removes the earlier run's label files the new run did not write);
``out`` is claimed for the run (a lock on ``<out>/selected_capabilities.json.lock``), so a second run on the same
``out`` fails at once instead of mixing its results in. Sweep the thresholds with
``-m analysis.delta=0.1,0.2,0.3 analysis.rho=0.05,0.1,0.2``; the sweep dir then gets
``sweep_table.csv`` / ``sweep_table.html``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

from trace_envs.records import ReadReport, read_trajectories
from trace_train.analysis.aggregate import candidates_table
from trace_train.analysis.config import AnalysisConfig
from trace_train.analysis.run import check_analysis, result_files, run_analysis
from trace_train.commands._app import command_app

logger = logging.getLogger(__name__)

LABELERS = ("programmatic", "llm")


@dataclass(frozen=True)
class Checked:
    """The settings of one analysis, checked (nothing read but the config, nothing written)."""

    trajectories: Path
    analysis: AnalysisConfig
    labeler: str


def check_values(cfg: DictConfig) -> Checked:
    """Every value of the command that can be checked before the trajectories are read (``ValueError`` saying what
    to set); imports ``imports`` (they register an env's probes). In a ``-m`` sweep, run on every job's config
    before the first job."""
    import importlib

    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import RESULTS_IF_EXISTS, ConfigError, check_groups, existing_path

    check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}", "its selected_capabilities.json and labels")
    check_groups(cfg, "analysis")
    if str(cfg.labeler) not in LABELERS:
        raise ConfigError(f"labeler={cfg.labeler!r}: choose one of {', '.join(LABELERS)}")
    if cfg.get("if_exists") not in RESULTS_IF_EXISTS:
        raise ConfigError(f"if_exists must be one of {', '.join(RESULTS_IF_EXISTS)}, got {cfg.get('if_exists')!r}")
    trajectories = existing_path(cfg.trajectories, "trajectories", "JSONL file", must_be="file")
    analysis = AnalysisConfig.from_dict(cfg.analysis)
    for module in cfg.get("imports") or []:  # a user's module that registers its env's probes
        try:
            importlib.import_module(str(module))
        except ImportError as exc:
            raise ConfigError(f"imports=[{module}]: cannot import module {module!r} ({exc})") from None
    return Checked(trajectories, analysis, str(cfg.labeler))


@command_app("analyze", check=check_values)
def main(cfg: DictConfig) -> None:
    from trace_envs.llm_http import ServerError
    from trace_envs.records import OutputBusyError, exclusive_output
    from trace_train.commands._validate import (
        ConfigError,
        check_results_dir,
        fail,
        remove_stale_results,
    )

    try:
        checked = check_values(cfg)
        out = Path(to_absolute_path(str(cfg.out)))
        check_results_dir(out, "out", result_files, cfg.if_exists)  # again under the lock, below
    except (ConfigError, ValueError) as exc:
        fail("analyze", str(exc))
    report = ReadReport()
    try:
        records = read_trajectories(checked.trajectories, report)
    except ValueError as exc:  # a RecordError names the file and line
        fail("analyze", str(exc))
    if report.truncated_last_line:
        logger.warning("%s: truncated last line skipped", cfg.trajectories)
    if not records:
        fail("analyze", f"trajectories={cfg.trajectories}: holds no trajectories; set trajectories=<JSONL of "
                        "trace-rl rollout records>")
    try:
        check_analysis(records, checked.analysis, checked.labeler)  # before anything is written into out
    except ValueError as exc:
        fail("analyze", str(exc))
    meta = {"trajectories": str(cfg.trajectories)}
    if HydraConfig.initialized():
        meta["overrides"] = list(HydraConfig.get().overrides.task)
    try:  # out is this run's from the results check to the last file written: a second run on it fails at once
        with exclusive_output(out / "selected_capabilities.json"):
            try:
                stale = check_results_dir(out, "out", result_files, cfg.if_exists)
            except ConfigError as exc:
                fail("analyze", str(exc))
            output = run_analysis(records, checked.analysis, checked.labeler, out, meta)
            remove_stale_results(stale)  # if_exists=overwrite: no label file of the earlier run stays
    except (OutputBusyError, ServerError, ValueError) as exc:  # ServerError: the LLM labeler's endpoint
        fail("analyze", str(exc))
    console = Console()
    console.print(candidates_table(output.result))
    console.print(f"selected: {[c.name for c in output.result.selected]} -> "
                  f"{output.out_dir / 'selected_capabilities.json'}")


if __name__ == "__main__":
    main()
