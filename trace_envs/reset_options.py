"""Boolean reset options (``reset(options={"hint": True})``, ``{"twin": True}``): reading one, and naming the envs
that do not honour one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def flag(options: dict[str, Any] | None, name: str) -> bool:
    """Whether reset ``options`` set the boolean option ``name``; a non-bool value is an error."""
    value = (options or {}).get(name, False)
    if not isinstance(value, bool):
        raise ValueError(f"reset option {name!r} must be a bool, got {value!r}")
    return value


def envs_not_honouring(env_ids: list[str], env_kwargs: Mapping[str, Any], name: str,
                       honoured: Callable[[dict[str, Any]], bool]) -> list[str]:
    """The envs of ``env_ids`` whose ``reset(seed=0, options={name: True})`` raises (``TypeError``, ``ValueError``,
    ``KeyError``: the env refuses the option) or returns an info that ``honoured`` rejects."""
    import gymnasium

    missing = []
    for env_id in env_ids:
        env = gymnasium.make(env_id, **dict(env_kwargs))
        try:
            _, info = env.reset(seed=0, options={name: True})
        except (TypeError, ValueError, KeyError):
            info = {}
        finally:
            env.close()
        if not honoured(info):
            missing.append(env_id)
    return missing
