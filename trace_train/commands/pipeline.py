"""``trace-rl pipeline [preset=quick|paper] [pipeline.<key>=...]``: all of TRACE, one report."""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig
from rich.console import Console

from trace_train.paths import CONF_DIR, REPO_ROOT

logger = logging.getLogger(__name__)


@hydra.main(config_path=str(CONF_DIR), config_name="pipeline", version_base=None)
def main(cfg: DictConfig) -> None:
    import trace_envs  # noqa: F401
    from trace_train.bootstrap.trainer import BootstrapPaused
    from trace_train.commands._validate import check_groups, fail, known_env, model_dir, paused
    from trace_train.pipeline.config import PipelineConfigs
    from trace_train.pipeline.run import Pipeline

    console = Console()
    try:
        check_groups(cfg, "pipeline", "bootstrap", "analysis", "synthesis", "grpo", "moe")
        configs = PipelineConfigs.from_hydra(cfg)
        for target in configs.pipeline.targets:
            known_env(target, "pipeline.target_env")
        if configs.pipeline.base_model:
            model_dir(configs.pipeline.base_model, "pipeline.base_model")
        pipeline = Pipeline.from_configs(configs, REPO_ROOT)
    except (TypeError, ValueError) as exc:
        fail("pipeline", str(exc))
    try:
        out = pipeline.run()
    except BootstrapPaused as exc:  # bootstrap.time_budget_min was set: the same command continues the run
        paused("pipeline", str(exc))
    line = pipeline.headline()
    if line:
        console.print(f"[bold]{line}[/bold]")
    console.print(f"report: {out['report']}")
