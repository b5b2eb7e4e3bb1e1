"""``trace-rl synthesize selected=<selected_capabilities.json> [out_dir=<dir>]``.

For each selected capability with an env family: search its difficulty knobs with the calibration
policy until the gate passes, then add a row to ``<out_dir>/manifest.json`` that registers
``trace/<capability>-<domain>-v0`` with the calibrated knobs (default ``out_dir``: the user data directory
``~/.local/share/trace-rl/generated_envs``, registered on ``import trace_envs``; never the installed package).
Capabilities without a family are named (they need the LLM-driven generator); capabilities whose gate
cannot be met are reported with their closest statistics and not emitted. Writes
``<out>/synthesis_report.json``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console

import trace_envs  # noqa: F401  (registers the trace/ ids)
import trace_train.paths
from trace_envs.synthesis import SelectedCapability, SynthesisConfig, expert_collector, read_selected, synthesize
from trace_envs.synthesis.emit import MANIFEST, atomic_write_text, read_manifest_strict
from trace_envs.synthesis.llm.swe_scenario import is_swe_target
from trace_train.calibration import collector_for
from trace_train.commands._app import command_app
from trace_train.commands._synthesis_common import check_policy, stats_table, synthesis_config
from trace_train.synthesis.generator import check_llm_config, run_llm_stage

logger = logging.getLogger(__name__)


def _default_out_dir() -> Path:
    return trace_train.paths.generated_envs_dir()


@dataclass(frozen=True)
class Checked:
    """The settings of one synthesis, checked (no model loaded, nothing written)."""

    synthesis: SynthesisConfig
    selected_path: str
    selected: list[SelectedCapability]


def check_values(cfg: DictConfig) -> Checked:
    """Every value of the command that can be checked before a model loads (``ValueError`` / ``TypeError`` saying
    what to set); in a ``-m`` sweep, run on every job's config before the first job."""
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_groups, existing_path

    check_multirun_output(cfg, "out_dir", "generated/${hydra:job.num}", "its rows of manifest.json")
    check_multirun_output(cfg, "out", "${hydra:runtime.output_dir}", "its synthesis_report.json")
    check_groups(cfg, "synthesis")
    scfg = synthesis_config(cfg)
    check_policy(scfg)
    selected_path = str(existing_path(cfg.selected, "selected", "selected_capabilities.json file", must_be="file"))
    return Checked(scfg, selected_path, read_selected(selected_path))


@command_app("synthesize", check=check_values)
def main(cfg: DictConfig) -> None:
    from trace_train.commands._validate import fail

    try:
        checked = check_values(cfg)
        scfg, selected_path, selected = checked.synthesis, checked.selected_path, checked.selected
    except (TypeError, ValueError) as exc:
        fail("synthesize", str(exc))
    out_dir = Path(to_absolute_path(str(cfg.out_dir))) if cfg.out_dir else _default_out_dir()
    try:  # a manifest the emitter could not extend is refused before any calibration
        read_manifest_strict(out_dir / MANIFEST)
    except ValueError as exc:
        fail("synthesize", str(exc))
    console = Console()
    rows = []
    try:
        model = collector_for(scfg)  # synthesis.policy's model (None: the scripted expert), one for both stages
        llm_collector = model if scfg.generator == "llm" else None
        check_llm_config(scfg, llm_collector)
        rollouts = model or expert_collector(scfg)
    except (TypeError, ValueError) as exc:
        fail("synthesize", str(exc))
    # a SWE target (synthesis.domain=swe) gets LLM-written SWE scenarios only: the families build tool envs
    family_caps = [] if scfg.generator == "llm" and is_swe_target(scfg.domain) else selected
    report = synthesize(family_caps, scfg, out_dir, source=selected_path, collector=rollouts,
                        on_trial=lambda cap, t: rows.append((cap, t.knobs, t.stats, t.failures)))
    trajectories = to_absolute_path(str(cfg.trajectories)) if cfg.get("trajectories") else None
    llm_results = run_llm_stage(selected, scfg, out_dir, llm_collector, trajectories, source=selected_path)
    if rows:
        console.print(stats_table(rows))
    for entry in report.emitted:
        console.print(f"[green]emitted[/green] {entry['env_id']} -> {out_dir / 'manifest.json'}")
    for res in llm_results:
        colour = "green" if res.accepted else "red"
        console.print(f"[{colour}]LLM env generator, {res.capability}[/{colour}]: {res.reason}"
                      + (f" -> {res.entry['env_id']}" if res.entry else ""))
    handled = {res.capability for res in llm_results}
    for name in [n for n in report.no_family if n not in handled]:
        console.print(f"[yellow]no env family for capability {name!r}[/yellow]: it needs the LLM-driven "
                      "environment generator; skipped")
    for item in report.failed:
        closest = item["closest"]
        console.print(f"[red]{item['capability']}: calibration gate not met[/red]; closest {closest['knobs']}: "
                      f"{closest['failures']}")
    out = Path(to_absolute_path(cfg.out)) / "synthesis_report.json"
    atomic_write_text(out, json.dumps({**report.to_dict(), "llm": [r.to_dict() for r in llm_results]}, indent=2)
                      + "\n")
    console.print(f"report -> {out}")


if __name__ == "__main__":
    main()
