"""τ²-Bench airline/retail in a neutral form for other trace-rl parts (e.g. capability families).

Everything comes from the real tau2 package: the policy, the tool schemas and which tools write,
a fresh DB per world (copy-on-access, see ``runtime.fresh_db``), tools bound to that world as a
``ToolBox`` (calls run through tau2's ``Environment.get_response``), gold replay, tau2's DB hash,
per-record states for diffs, and the tasks' gold actions / communicate info / user scenario.

    d = Tau2Domain("retail")
    world = d.new_world()
    world.tools.call("get_order_details", {"order_id": "#W2378156"})
    d.replay([("cancel_pending_order", {...})]).db_hash()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_envs.tau2.env import Tau2ToolBox, agent_system_prompt
from trace_envs.tau2.runtime import env_constructor, require_tau2
from trace_envs.tau2.tasks import load_task_set


@dataclass
class GoldTask:
    """One τ² task in plain data: the user's scenario and the ground truth."""

    task_id: str
    reason_for_call: str
    known_info: str
    task_instructions: str
    gold_actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    communicate: list[str] = field(default_factory=list)
    reward_basis: list[str] = field(default_factory=list)
    nl_assertions: list[str] = field(default_factory=list)


class Tau2World:
    """One mutable τ² world: a tau2 Environment with its own fresh DB."""

    def __init__(self, environment: Any):
        self.environment = environment
        self.tools = Tau2ToolBox(environment)

    @property
    def db(self) -> Any:
        """tau2's pydantic DB (``model_dump()`` gives the plain dict)."""
        return self.environment.tools.db

    def db_hash(self) -> str:
        return self.environment.get_db_hash()

    def record(self, collection: str, key: str) -> dict[str, Any]:
        """One record as a plain dict, e.g. ``record("orders", "#W2378156")``."""
        return getattr(self.db, collection)[key].model_dump()

    def entity_states(self, keys: list[tuple[str, str]]) -> dict[str, Any]:
        """``{"collection/key": record}`` for the given records (cheap per-entity diffs)."""
        return {f"{c}/{k}": self.record(c, k) for c, k in keys}


class Tau2Domain:
    """Data and primitives of one τ² domain (``airline`` or ``retail``)."""

    def __init__(self, name: str, task_file: str = "bundled"):
        require_tau2()
        from tau2.environment.toolkit import ToolType

        self.name = name
        self.task_file = task_file
        self._construct = env_constructor(name)
        probe = self._construct()
        self.policy = probe.get_policy()
        self.system_prompt = agent_system_prompt(self.policy)
        self.tool_schemas = [t.openai_schema for t in probe.get_tools()]
        self.write_tools = frozenset(n for n in probe.tools.get_tools() if probe.tools.tool_type(n) == ToolType.WRITE)
        self.collections = tuple(type(probe.tools.db).model_fields)

    def new_world(self) -> Tau2World:
        return Tau2World(self._construct())

    def replay(self, actions: list[tuple[str, dict[str, Any]]], ignore_errors: bool = True) -> Tau2World:
        """A fresh world with ``actions`` applied in order (tau2's gold-replay semantics: errors ignored)."""
        world = self.new_world()
        for name, args in actions:
            try:
                world.environment.make_tool_call(name, requestor="assistant", **args)
            except Exception:
                if not ignore_errors:
                    raise
        return world

    def gold_tasks(self, split: str | None = "base") -> list[GoldTask]:
        task_set = load_task_set(self.name, self.task_file)
        out = []
        for task_id in task_set.ids(split):
            task = task_set.tasks[task_id]
            instr = task.user_scenario.instructions
            crit = task.evaluation_criteria
            out.append(GoldTask(
                task_id=task_id,
                reason_for_call=str(getattr(instr, "reason_for_call", "") or ""),
                known_info=str(getattr(instr, "known_info", "") or ""),
                task_instructions=str(getattr(instr, "task_instructions", instr) or ""),
                gold_actions=[(a.name, dict(a.arguments)) for a in (crit.actions or [])] if crit else [],
                communicate=list(crit.communicate_info or []) if crit else [],
                reward_basis=[str(getattr(b, "value", b)) for b in crit.reward_basis] if crit else [],
                nl_assertions=list(crit.nl_assertions or []) if crit else [],
            ))
        return out
