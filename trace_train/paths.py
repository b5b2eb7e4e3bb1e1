"""Where the project's non-Python assets live: the one place that resolves them.

Hydra configs (``conf/``), prompts (``prompts/``) and the shipped base checkpoints (``checkpoints/``) are found
through ``importlib.resources`` in the installed ``trace_rl_assets`` package (a wheel maps the repository's
top-level directories into it, see ``setup.py``); in a source checkout, where that package is empty, they are the
repository's own top-level directories. Nothing here depends on the working directory.

Emitted capability envs never go into the installed packages: ``trace-rl synthesize`` writes them to its
``out_dir`` or to :func:`generated_envs_dir` (``~/.local/share/trace-rl/generated_envs``), a pipeline to its
run directory.

Importing this module registers the OmegaConf resolvers ``${shipped:<name>}`` (the absolute directory of the
shipped checkpoint ``<name>``), used by the configs that default to the shipped base, and
``${trace_pipeline_logs:<run_dir>}`` (the pipeline's Hydra log folder).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from omegaconf import OmegaConf

ASSET_PACKAGE = "trace_rl_assets"
REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout's root, or site-packages in an installed wheel
SHIPPED_BASE = "retail-sim-tiny"


class AssetNotFoundError(FileNotFoundError):
    """An asset directory or shipped checkpoint is missing from the installation."""


def _is_checkout() -> bool:
    return (REPO_ROOT / "setup.py").is_file() and (REPO_ROOT / "setup.cfg").is_file()


def asset_dir(name: str) -> Path:
    """The directory of asset ``name`` (``conf``, ``prompts`` or ``checkpoints``)."""
    try:
        packaged = Path(str(importlib.resources.files(ASSET_PACKAGE) / name))
    except ModuleNotFoundError:
        packaged = None
    if packaged is not None and packaged.is_dir():
        return packaged
    if _is_checkout() and (REPO_ROOT / name).is_dir():
        return REPO_ROOT / name
    raise AssetNotFoundError(f"trace-rl's {name}/ directory is missing from the installation "
                             f"(looked in {packaged} and the checkout {REPO_ROOT}); reinstall trace-rl")


CONF_DIR = asset_dir("conf")
PROMPTS_DIR = asset_dir("prompts")
CHECKPOINTS_DIR = asset_dir("checkpoints")


def shipped_checkpoint(name: str = SHIPPED_BASE) -> Path:
    """The absolute directory of a checkpoint shipped with trace-rl (never the working directory, never a hub).

    ``name`` is the checkpoint's folder (``retail-sim-tiny``); ``checkpoints/<name>`` is accepted too."""
    name = str(name).removeprefix("checkpoints/").strip("/")
    path = CHECKPOINTS_DIR / name
    if not name or "/" in name or not (path / "config.json").is_file():
        have = sorted(p.name for p in CHECKPOINTS_DIR.iterdir() if p.is_dir()) if CHECKPOINTS_DIR.is_dir() else []
        raise AssetNotFoundError(f"no shipped checkpoint {name!r} in {CHECKPOINTS_DIR} (shipped: {have}); "
                                 "reinstall trace-rl or pass the model directory you want explicitly")
    return path


def generated_envs_dir() -> Path:
    """Default ``out_dir`` of ``trace-rl synthesize`` (``~/.local/share/trace-rl/generated_envs``); its manifest
    is registered on ``import trace_envs``."""
    import generated_envs

    return generated_envs.user_dir()


OmegaConf.register_new_resolver("shipped", lambda name=SHIPPED_BASE: str(shipped_checkpoint(name)), replace=True)


def pipeline_logs_dir(run_dir: object) -> str:
    """Hydra's run dir for a pipeline run (``${trace_pipeline_logs:...}`` in ``conf/pipeline.yaml``):
    ``<run_dir>/.hydra_logs``; when ``run_dir`` is an existing file, ``outputs/pipeline`` instead, so Hydra can
    start and ``trace-rl pipeline`` refuses ``run_dir`` in one line."""
    path = Path(str(run_dir)).expanduser()
    if path.exists() and not path.is_dir():
        return "outputs/pipeline"
    return f"{run_dir}/.hydra_logs"


OmegaConf.register_new_resolver("trace_pipeline_logs", pipeline_logs_dir, replace=True)
