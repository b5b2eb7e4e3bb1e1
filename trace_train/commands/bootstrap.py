"""``trace-rl bootstrap``: behaviour cloning of the tiny base agent (cached by config hash, resumable)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from trace_train.paths import CONF_DIR

logger = logging.getLogger(__name__)


@hydra.main(config_path=str(CONF_DIR), config_name="bootstrap", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.bootstrap.config import BootstrapConfig
    from trace_train.bootstrap.trainer import Bootstrapper
    from trace_train.commands._validate import check_groups, fail

    try:
        check_groups(cfg, "bootstrap")
        config = BootstrapConfig.from_dict(OmegaConf.to_container(cfg.bootstrap, resolve=True))
    except (TypeError, ValueError) as exc:
        fail("bootstrap", str(exc))
    runner = Bootstrapper(config, Path(cfg.cache_dir))
    summary = runner.run()
    logger.info("bootstrap %s: %s", runner.config_hash, json.dumps(summary["probe"]))
    if cfg.export_to:
        target = Path(cfg.export_to)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(runner.model_dir, target)
        (target / "bootstrap.json").write_text(json.dumps(summary, indent=2))
        logger.info("exported the bootstrapped model to %s", target)
