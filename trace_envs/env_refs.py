"""Resolving env references, the one resolver every command uses: ids, ``module:id``, modules that register ids,
and the envs a pipeline run synthesized (``run_dir=``)."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from pathlib import Path

import gymnasium as gym

import generated_envs


def register_run_dir(run_dir: str | Path) -> list[str]:
    """Register the envs a pipeline run synthesized (``<run_dir>/synthesis/manifest.json``, or a bare
    ``<dir>/manifest.json`` such as ``generated_envs/``); returns their ids. ``ValueError`` if there is none."""
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise ValueError(f"run_dir={run_dir} is not a directory; pass the folder a `trace-rl pipeline` run wrote")
    for folder in (root / "synthesis", root):
        if (folder / generated_envs.MANIFEST).is_file():
            return generated_envs.load(folder)
    raise ValueError(f"run_dir={run_dir} holds no synthesis/{generated_envs.MANIFEST}; "
                     f"run the pipeline's synthesis stage first or drop run_dir=")


def resolve_env_ids(env_ids: Iterable[str], *, imports: Iterable[str] = (),
                    run_dirs: Iterable[str | Path] = ()) -> list[str]:
    """The one resolver of env references that every command uses; returns ``env_ids`` unchanged.

    First imports each module of ``imports`` (a user's module that calls ``gym.register``), then
    registers the generated envs of each run directory, then checks every id: ``"module:id"``
    imports ``module`` first (as ``gym.make`` does), and the id must then be in ``gymnasium.registry``.
    Raises ``ValueError`` with one line saying what to fix; nothing is instantiated.
    """
    for module in imports:
        _import(str(module), f"imports=[{module}]")
    for run_dir in run_dirs:
        register_run_dir(run_dir)
    ids = [str(e) for e in env_ids]
    for env_id in ids:
        name = env_id
        if ":" in env_id:
            module, name = env_id.split(":", 1)
            _import(module, f"env id {env_id!r}")
        if name not in gym.registry:
            close = difflib.get_close_matches(name, list(gym.registry), n=3)
            hint = (f"; did you mean {close}?" if close else "") + (
                "; add imports=[<module that registers it>], write env=<module>:<id>, or pass run_dir=<pipeline "
                "run> for the envs a run synthesized")
            raise ValueError(f"unknown env id {env_id!r}: not in gymnasium.registry{hint}")
    return ids


def _import(module: str, what: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"{what}: cannot import module {module!r} ({exc}); is it on sys.path?") from exc
