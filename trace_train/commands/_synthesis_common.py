"""Helpers shared by ``trace-rl calibrate`` and ``trace-rl synthesize``."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from trace_envs.synthesis import CalibrationStats, Collector, SynthesisConfig, expert_collector


def synthesis_config(cfg: DictConfig) -> SynthesisConfig:
    return SynthesisConfig.from_dict(OmegaConf.to_container(cfg.synthesis, resolve=True))  # type: ignore[arg-type]


def check_policy(cfg: SynthesisConfig) -> None:
    """``synthesis.policy``: a model policy names an existing model (checked before any loads)."""
    from trace_train.commands._validate import ConfigError, model_dir

    if cfg.policy.kind != "scripted":
        if not cfg.policy.model:
            raise ConfigError(f"synthesis.policy.kind={cfg.policy.kind} needs synthesis.policy.model=<local HF "
                              "directory>")
        model_dir(cfg.policy.model, "synthesis.policy.model")


def collector(cfg: SynthesisConfig) -> Collector:
    """The calibration rollouts: the scripted expert of ``synthesis.policy`` or its model."""
    from trace_train.calibration import collector_for

    return collector_for(cfg) or expert_collector(cfg)


def stats_table(rows: list[tuple[str, dict[str, Any], CalibrationStats, list[str]]]) -> Table:
    """One row per calibrated env; with hints, the success of the hinted / unhinted members too."""
    hints = any(s.hinted is not None for _, _, s, _ in rows)
    table = Table(show_header=True, header_style="bold")
    columns = ["env", "knobs", "reward", "success", "std", "all-1", "all-0", "const", "pass@k", "gate"]
    if hints:
        columns[4:4] = ["success hinted", "success unhinted"]
    for col in columns:
        table.add_column(col)
    for name, knobs, s, failures in rows:
        cells = [name, str(knobs), f"{s.mean_reward:.3f}", f"{s.success_rate:.3f}", f"{s.reward_std:.3f}",
                 f"{s.frac_all_success:.2f}", f"{s.frac_all_zero:.2f}", f"{s.frac_constant:.2f}",
                 " ".join(f"{k}:{v:.2f}" for k, v in s.pass_at_k.items()),
                 "[green]PASS[/green]" if not failures else "[red]" + "; ".join(failures) + "[/red]"]
        if hints:
            cells[4:4] = [_rate(s.hinted), _rate(s.unhinted)]
        table.add_row(*cells)
    return table


def _rate(stats: CalibrationStats | None) -> str:
    return "–" if stats is None else f"{stats.success_rate:.3f}"
