"""``trace-rl synthesize selected=<selected_capabilities.json> [out_dir=<dir>]``.

For each selected capability with an env family: search its difficulty knobs with the calibration
policy until the gate passes, then emit ``<out_dir>/<capability>_<domain>.py`` registering
``trace/<capability>-<domain>-v0`` plus a manifest entry (default ``out_dir``: ``generated_envs/``).
Capabilities without a family are named (they need the LLM-driven generator); capabilities whose gate
cannot be met are reported with their closest statistics and not emitted. Writes
``<out>/synthesis_report.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

import generated_envs
import trace_envs  # noqa: F401  (registers the trace/ ids)
import trace_train.paths
from trace_envs.synthesis import read_selected, synthesize
from trace_envs.synthesis.emit import atomic_write_text
from trace_train.commands._synthesis_common import collector, stats_table, synthesis_config

logger = logging.getLogger(__name__)


def _default_out_dir() -> Path:
    return generated_envs.generated_dir()


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="synthesize", version_base=None)
def main(cfg: DictConfig) -> None:
    scfg = synthesis_config(cfg)
    selected_path = to_absolute_path(str(cfg.selected))
    selected = read_selected(selected_path)
    out_dir = Path(to_absolute_path(str(cfg.out_dir))) if cfg.out_dir else _default_out_dir()
    console = Console()
    rows = []
    report = synthesize(selected, scfg, out_dir, source=selected_path, collector=collector(scfg),
                        on_trial=lambda cap, t: rows.append((cap, t.knobs, t.stats, t.failures)))
    if rows:
        console.print(stats_table(rows))
    for entry in report.emitted:
        console.print(f"[green]emitted[/green] {entry['env_id']} -> {out_dir / entry['module']}")
    for name in report.no_family:
        console.print(f"[yellow]no env family for capability {name!r}[/yellow]: it needs the LLM-driven "
                      "environment generator; skipped")
    for item in report.failed:
        closest = item["closest"]
        console.print(f"[red]{item['capability']}: calibration gate not met[/red]; closest {closest['knobs']}: "
                      f"{closest['failures']}")
    out = Path(to_absolute_path(cfg.out)) / "synthesis_report.json"
    atomic_write_text(out, json.dumps(report.to_dict(), indent=2) + "\n")
    console.print(f"report -> {out}")


if __name__ == "__main__":
    main()
