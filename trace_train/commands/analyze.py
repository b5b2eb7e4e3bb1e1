"""``trace-rl analyze trajectories=<jsonl> labeler=programmatic|llm out=<dir>``.

Contrastive capability analysis (paper §2): label every (trajectory, capability) pair in N runs,
aggregate Cov / Δ per run, keep capabilities that pass ≥ K runs; writes
``<out>/selected_capabilities.json`` and ``<out>/labels/run_XX.json``. Sweep the thresholds with
``-m analysis.delta=0.1,0.2,0.3 analysis.rho=0.05,0.1,0.2``; the sweep dir then gets
``sweep_table.csv`` / ``sweep_table.html``.
"""

from __future__ import annotations

import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

import trace_train.paths
from trace_train.analysis.aggregate import candidates_table
from trace_train.analysis.run import run_analysis
from trace_train.trajectory import ReadReport, read_trajectories

logger = logging.getLogger(__name__)


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="analyze", version_base=None)
def main(cfg: DictConfig) -> None:
    report = ReadReport()
    records = read_trajectories(to_absolute_path(cfg.trajectories), report)
    if report.truncated_last_line:
        logger.warning("%s: truncated last line skipped", cfg.trajectories)
    meta = {"trajectories": str(cfg.trajectories)}
    if HydraConfig.initialized():
        meta["overrides"] = list(HydraConfig.get().overrides.task)
    output = run_analysis(records, cfg.analysis, cfg.labeler, to_absolute_path(cfg.out), meta)
    console = Console()
    console.print(candidates_table(output.result))
    console.print(f"selected: {[c.name for c in output.result.selected]} -> "
                  f"{output.out_dir / 'selected_capabilities.json'}")


if __name__ == "__main__":
    main()
