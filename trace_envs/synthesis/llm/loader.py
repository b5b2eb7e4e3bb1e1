"""Gymnasium entry point of an emitted LLM-written env: loads its *validated* source by path.

The manifest pins the source's sha256; a file that no longer matches (edited after validation) or no
longer passes the static check is refused, never imported.

What runs where: by default (``confined=True``) :func:`make_env` returns a host-side proxy,
``confined_env.ConfinedEnv``, and the module runs only in a persistent confined worker subprocess
(``worker.py``, with the dynamic check's confinement: namespaces, a filesystem jail, resource limits, no
network where the kernel allows them); the host never imports it. The worker loads it with
:func:`load_env_class` (the same sha256 and static check, the very text it checked, a time limit on the
import). ``confined=False`` (debugging only) imports it in the host process, with the host's full rights,
as trace-rl did before the worker existed.
"""

from __future__ import annotations

from typing import Any

from trace_envs.synthesis.llm.confined_env import ConfinedEnv
from trace_envs.synthesis.llm.validated import load_env_class, sha256_text

__all__ = ["ENTRY_POINT", "load_env_class", "make_env", "sha256_text"]

ENTRY_POINT = "trace_envs.synthesis.llm.loader:make_env"


def make_env(source: str, sha256: str, confined: bool = True, **kwargs: Any) -> Any:
    """``gym.make`` entry point: ``source`` (the module path) and ``sha256`` come from the registration.

    ``confined=True`` (the default): a ``ConfinedEnv`` proxy whose module runs in a confined worker subprocess
    (see the module docstring); ``kwargs`` (``domain``, ``max_steps``, ``max_errors``, ``render_mode``) go to the
    module's ``Env`` there and must be JSON values. ``confined=False`` (``gym.make(env_id, confined=False)``, for
    debugging only): the module's ``Env`` itself, imported and run in this process with its full rights.
    """
    if not isinstance(confined, bool):
        raise TypeError(f"confined must be a bool, got {confined!r}")
    if not confined:
        return load_env_class(source, sha256)(**kwargs)
    return ConfinedEnv(source, sha256, kwargs)
