"""``trace-rl pipeline [preset=quick|paper] [pipeline.<key>=...]``: all of TRACE, one report."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from trace_train.commands._app import command_app
from trace_train.paths import REPO_ROOT

logger = logging.getLogger(__name__)


def _check_run_dir(run_dir: object) -> None:
    """``pipeline.run_dir`` is a directory to create or continue, never an existing file."""
    from hydra.utils import to_absolute_path

    if run_dir in (None, ""):
        raise ValueError("pipeline.run_dir is required: set pipeline.run_dir=<directory>")
    path = Path(to_absolute_path(str(run_dir)))
    if path.exists() and not path.is_dir():
        raise ValueError(f"pipeline.run_dir={run_dir}: exists and is not a directory; set pipeline.run_dir=<directory>")


def _check_policy_temperature(cfg: DictConfig) -> None:
    """``pipeline.policy.temperature`` by its own name (the grpo group's temperature interpolates it)."""
    value = cfg.pipeline.policy.get("temperature")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"pipeline.policy.temperature must be a number > 0, got {value!r} (greedy decoding is "
                         "pipeline.eval.greedy); set pipeline.policy.temperature=<number > 0>")


def _check_shipped_checkpoint(name: str) -> None:
    """``pipeline.shipped_checkpoint``: a checkpoint shipped with trace-rl or an absolute model directory."""
    from trace_train.paths import AssetNotFoundError, shipped_checkpoint

    given = Path(name).expanduser()
    if given.is_absolute():
        if not (given / "config.json").is_file():
            raise ValueError(f"pipeline.shipped_checkpoint={name}: no model (config.json) in it; set "
                             "pipeline.shipped_checkpoint=<shipped name or absolute model directory> or null to "
                             "bootstrap")
        return
    try:
        shipped_checkpoint(name)
    except AssetNotFoundError as exc:
        raise ValueError(f"pipeline.shipped_checkpoint={name}: {exc}; or set pipeline.shipped_checkpoint=null to "
                         "bootstrap") from None


@command_app("pipeline")
def main(cfg: DictConfig) -> None:
    import trace_envs  # noqa: F401
    from trace_train.bootstrap.trainer import BootstrapPaused
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_groups, fail, known_env, model_dir, paused
    from trace_train.pipeline.config import PipelineConfigs
    from trace_train.pipeline.run import Pipeline

    console = Console()
    try:
        check_multirun_output(cfg, "pipeline.run_dir", "runs/sweep/${hydra:job.num}",
                              "the whole run (its adapters, composition and report)")
        _check_run_dir(cfg.pipeline.run_dir)
        _check_policy_temperature(cfg)
        check_groups(cfg, "pipeline", "bootstrap", "analysis", "synthesis", "grpo", "moe")
        configs = PipelineConfigs.from_hydra(cfg)
        for target in configs.pipeline.targets:
            known_env(target, "pipeline.target_env")
        if configs.pipeline.base_model:
            model_dir(configs.pipeline.base_model, "pipeline.base_model")
        elif configs.pipeline.shipped_checkpoint:
            _check_shipped_checkpoint(str(configs.pipeline.shipped_checkpoint))
        pipeline = Pipeline.from_configs(configs, REPO_ROOT)
    except (TypeError, ValueError, FileNotFoundError) as exc:
        fail("pipeline", str(exc))
    try:
        out = pipeline.run()
    except BootstrapPaused as exc:  # bootstrap.time_budget_min was set: the same command continues the run
        paused("pipeline", str(exc))
    line = pipeline.headline()
    if line:
        console.print(f"[bold]{line}[/bold]")
    console.print(f"report: {out['report']}")
