"""Counterfactual twins: ``reset(seed=s, options={"twin": True})`` plays the task of seed ``s`` with its decision
flipped (the same world and request kind; a refusal case where the seed drew an allowed request, an allowed
request where it drew a refusal). Seeded-group GRPO with ``grpo.twin_groups`` trains each task next to its twin,
so the update sees the two sides of one decision on the same context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trace_envs.reset_options import envs_not_honouring, flag


def twin_requested(options: dict[str, Any] | None) -> bool:
    """Whether reset ``options`` ask for the counterfactual twin (``{"twin": True}``); a non-bool is an error."""
    return flag(options, "twin")


def envs_without_twins(env_ids: list[str], env_kwargs: Mapping[str, Any]) -> list[str]:
    """The envs of ``env_ids`` that do not play a twin on ``reset(options={"twin": True})``: an env that refuses the
    option or whose reset info does not say ``twin: True``."""
    return envs_not_honouring(env_ids, env_kwargs, "twin", lambda info: info.get("twin") is True)
