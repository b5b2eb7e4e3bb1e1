"""Hints (paper §3.5, "expert guidance"): one soft guidance text per capability, never the answer.

``reset(options={"hint": True})`` on an env that supports hints appends the guidance to its system
prompt inside ``<expert_guidance>`` tags; the task drawn from the seed does not change. Such an env
reports ``info['hint']`` (the guidance, or ``None`` when no hint applies to this task),
``info['hint_capability']`` and ``info['unhinted_system_prompt']`` (the plain policy, which a trainer
swaps back in before the update). A hint says what to attend to; it never names a tool call, an id or
an argument value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trace_envs.reset_options import envs_not_honouring, flag

HINT_OPEN, HINT_CLOSE = "<expert_guidance>", "</expert_guidance>"


def hinted_count(fraction: float, group_size: int, name: str = "hint_fraction") -> int:
    """How many members of a group of ``group_size`` play with the hint: exactly ``fraction × group_size``.

    ``ValueError`` (naming ``name``) when the fraction is outside [0, 1] or is not a whole number of members
    (0.25 of a group of 6 would be 1 or 2 members, neither of them the configured share)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {fraction}")
    members = fraction * group_size
    count = int(members + 0.5)
    if abs(members - count) > 1e-9:
        raise ValueError(f"{name}={fraction} of a group of {group_size} is {members:g} members; choose a fraction "
                         f"that is a whole number of members (k / {group_size})")
    return count

CAPABILITY_HINTS: dict[str, str] = {
    "precondition_verification": (
        "Before you change anything, check that the record belongs to the customer you are talking to and "
        "that its current status allows the change. If a check fails, do not call a write tool: tell the "
        "customer that you cannot do it and why."
    ),
    "structured_data_reasoning": (
        "Before you choose, compare every candidate against all of the customer's constraints at once (each "
        "attribute and any limit they gave), and pick only one that meets every constraint. Re-read the "
        "constraints before you answer."
    ),
    "multi_step_task_completion": (
        "The customer may ask for several things at once. Keep a list of every request and do not end the "
        "conversation until each one is done."
    ),
    "tool_calling_precision": (
        "In every write call use exactly the values the customer stated (reasons, payment methods, address "
        "fields, item choices); do not fill in defaults or values from the record when the customer said "
        "something else."
    ),
}


def with_hint(system_prompt: str, hint: str) -> str:
    """The system prompt with ``hint`` appended as an ``<expert_guidance>`` block."""
    return f"{system_prompt}\n\n{HINT_OPEN}\n{hint}\n{HINT_CLOSE}"


def hint_requested(options: dict[str, Any] | None) -> bool:
    """Whether reset ``options`` ask for the hint (``{"hint": True}``); a non-bool value is an error."""
    return flag(options, "hint")


def envs_without_hints(env_ids: list[str], env_kwargs: Mapping[str, Any]) -> list[str]:
    """The envs of ``env_ids`` whose ``reset(options={"hint": True})`` gives no hinted prompt: an env that refuses
    the option or whose reset info has no ``unhinted_system_prompt`` (an LLM-written env, a target)."""
    return envs_not_honouring(env_ids, env_kwargs, "hint", lambda info: "unhinted_system_prompt" in info)
