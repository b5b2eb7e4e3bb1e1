"""The env-reference keys every command shares: ``env`` (``id`` or ``module:id``), ``imports`` and ``run_dir``.

``imports=[mymod]`` imports a user's module (which registers its ids) and ``run_dir=<pipeline run>``
registers the envs that run synthesized, both before any id is checked and before any model loads.
"""

from __future__ import annotations

from typing import Any

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a module name or a list of them, got {value!r}; set imports=[mymod, ...]")
    return [str(v) for v in value]


def resolve_cfg_envs(cfg: DictConfig, env_ids: list[str]) -> list[str]:
    """Resolve ``env_ids`` with the config's ``imports`` and ``run_dir``; ``ValueError`` saying what to fix."""
    from trace_envs.env_refs import resolve_env_ids

    run_dir = cfg.get("run_dir")
    run_dirs = [to_absolute_path(str(run_dir))] if run_dir else []
    return resolve_env_ids(env_ids, imports=_as_list(cfg.get("imports")), run_dirs=run_dirs)
