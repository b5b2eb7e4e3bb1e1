"""Registration of every trace-rl env under the ``trace/`` namespace (on ``import trace_envs``).

Gymnasium 1.x has no entry-point plugins: ids are registered when this package is imported, and
``gym.make("trace_envs:trace/<name>-v0")`` imports it in a fresh process.
"""

from __future__ import annotations

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
