"""``trace-rl analyze trajectories=<jsonl> labeler=programmatic|llm out=<dir>``.

Contrastive capability analysis (paper §2): label every (trajectory, capability) pair in N runs,
aggregate Cov / Δ per run, keep capabilities that pass ≥ K runs; writes
``<out>/selected_capabilities.json`` and ``<out>/labels/run_XX.json``; an ``out`` that already holds them is
refused unless ``if_exists=overwrite`` (which first removes the earlier run's label files). Sweep the thresholds with
``-m analysis.delta=0.1,0.2,0.3 analysis.rho=0.05,0.1,0.2``; the sweep dir then gets
``sweep_table.csv`` / ``sweep_table.html``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

import trace_train.paths
from trace_envs.records import ReadReport, read_trajectories
from trace_train.analysis.aggregate import candidates_table
from trace_train.analysis.run import check_analysis, result_files, run_analysis

logger = logging.getLogger(__name__)

LABELERS = ("programmatic", "llm")


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="analyze", version_base=None)
def main(cfg: DictConfig) -> None:
    import importlib

    from trace_train.analysis.config import AnalysisConfig
    from trace_train.commands._validate import (
        ConfigError,
        check_groups,
        check_multirun_output,
        check_results_dir,
        existing_path,
        fail,
        remove_stale_results,
    )

    try:
        check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}", "its selected_capabilities.json and labels")
        check_groups(cfg, "analysis")
        if str(cfg.labeler) not in LABELERS:
            raise ConfigError(f"labeler={cfg.labeler!r}: choose one of {', '.join(LABELERS)}")
        trajectories = existing_path(cfg.trajectories, "trajectories", "JSONL file", must_be="file")
        analysis = AnalysisConfig.from_dict(cfg.analysis)
        out = Path(to_absolute_path(str(cfg.out)))
        stale = check_results_dir(out, "out", result_files, cfg.get("if_exists"))
    except (ConfigError, ValueError) as exc:
        fail("analyze", str(exc))
    for module in cfg.get("imports") or []:  # a user's module that registers its env's probes
        try:
            importlib.import_module(str(module))
        except ImportError as exc:
            fail("analyze", f"imports=[{module}]: cannot import module {module!r} ({exc})")
    report = ReadReport()
    try:
        records = read_trajectories(trajectories, report)
    except ValueError as exc:  # a RecordError names the file and line
        fail("analyze", str(exc))
    if report.truncated_last_line:
        logger.warning("%s: truncated last line skipped", cfg.trajectories)
    try:
        check_analysis(records, analysis, str(cfg.labeler))  # before anything is written into out
    except ValueError as exc:
        fail("analyze", str(exc))
    meta = {"trajectories": str(cfg.trajectories)}
    if HydraConfig.initialized():
        meta["overrides"] = list(HydraConfig.get().overrides.task)
    output = run_analysis(records, analysis, cfg.labeler, out, meta)
    remove_stale_results(stale)  # if_exists=overwrite: no label file of the earlier run stays
    console = Console()
    console.print(candidates_table(output.result))
    console.print(f"selected: {[c.name for c in output.result.selected]} -> "
                  f"{output.out_dir / 'selected_capabilities.json'}")


if __name__ == "__main__":
    main()
