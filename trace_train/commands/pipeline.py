"""``trace-rl pipeline [preset=quick|paper] [pipeline.<key>=...]``: all of TRACE, one report."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from trace_train.paths import CONF_DIR, REPO_ROOT

logger = logging.getLogger(__name__)


@hydra.main(config_path=str(CONF_DIR), config_name="pipeline", version_base=None)
def main(cfg: DictConfig) -> None:
    import trace_envs  # noqa: F401
    from trace_envs.synthesis import SynthesisConfig
    from trace_train.bootstrap.config import BootstrapConfig
    from trace_train.grpo import GRPOConfig
    from trace_train.pipeline.config import PipelineConfig
    from trace_train.pipeline.run import Pipeline

    console = Console()
    try:
        pcfg = PipelineConfig.from_dict(OmegaConf.to_container(cfg.pipeline, resolve=True))
        bcfg = BootstrapConfig.from_dict(OmegaConf.to_container(cfg.bootstrap, resolve=True))
        scfg = SynthesisConfig.from_dict(OmegaConf.to_container(cfg.synthesis, resolve=True))
        gcfg = GRPOConfig.from_mapping(OmegaConf.to_container(cfg.grpo, resolve=True))
        gcfg.validate()
    except ValueError as exc:
        console.print(f"[red]trace-rl pipeline: {exc}[/red]")
        sys.exit(2)
    out = Pipeline(pcfg, bcfg, cfg.analysis, scfg, gcfg, REPO_ROOT).run()
    console.print(f"report: {out['report']}")
