"""Registration of every trace-rl env under the ``trace/`` namespace (on ``import trace_envs``).

Gymnasium 1.x has no entry-point plugins: ids are registered when this package is imported, and
``gym.make("trace_envs:trace/<name>-v0")`` imports it in a fresh process.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym

NAMESPACE = "trace"


def register_env(name: str, entry_point: str, *, nondeterministic: bool = False, **kwargs: Any) -> str:
    """Register ``trace/<name>-v0`` (idempotent); returns the id."""
    env_id = f"{NAMESPACE}/{name}-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, nondeterministic=nondeterministic, kwargs=kwargs)
    return env_id


def unregister_env(env_id: str) -> None:
    gym.registry.pop(env_id, None)


def trace_env_ids() -> list[str]:
    """All registered ``trace/`` ids, sorted."""
    return sorted(i for i in gym.registry if i.startswith(f"{NAMESPACE}/"))


def register_run_dir(run_dir: str | Path) -> list[str]:
    """Register the envs a pipeline run synthesized (``<run_dir>/synthesis/manifest.json``, or a bare
    ``<dir>/manifest.json`` such as ``generated_envs/``); returns their ids. ``ValueError`` if there is none."""
    import generated_envs

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
