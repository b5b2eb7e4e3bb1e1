"""Counterfactual twins: ``reset(seed=s, options={"twin": True})`` plays the task of seed ``s`` with its decision
flipped (the same world and request kind; a refusal case where the seed drew an allowed request, an allowed
request where it drew a refusal). Seeded-group GRPO with ``grpo.twin_groups`` trains each task next to its twin,
so the update sees the two sides of one decision on the same context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def twin_requested(options: dict[str, Any] | None) -> bool:
    """Whether reset ``options`` ask for the counterfactual twin (``{"twin": True}``); a non-bool is an error."""
    value = (options or {}).get("twin", False)
    if not isinstance(value, bool):
        raise ValueError(f"reset option 'twin' must be a bool, got {value!r}")
    return value


def envs_without_twins(env_ids: list[str], env_kwargs: Mapping[str, Any]) -> list[str]:
    """The envs of ``env_ids`` that do not play a twin on ``reset(options={"twin": True})``: an env that refuses the
    option or whose reset info does not say ``twin: True``."""
    import gymnasium

    missing = []
    for env_id in env_ids:
        env = gymnasium.make(env_id, **dict(env_kwargs))
        try:
            _, info = env.reset(seed=0, options={"twin": True})
        except (TypeError, ValueError, KeyError):
            info = {}
        finally:
            env.close()
        if info.get("twin") is not True:
            missing.append(env_id)
    return missing
