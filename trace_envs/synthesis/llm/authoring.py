"""The authoring API an LLM-written capability env is written against (``prompts/env_synthesis.md``).

A module defines one class ``Env(CapabilityEnv)`` with three methods:

* ``build_task(db, rng) -> TaskSpec``: draw one task on a fresh world of the target's domain. ``db`` is
  the domain's DB (retail-sim: ``users``, ``orders``, ``products``) and may be edited to set the scene;
  ``rng`` (a seeded ``numpy.random.Generator``) is the only source of randomness.
* ``verify(task, outcome) -> float``: the programmatic reward in [0, 1] of a finished episode (1.0 =
  solved). ``outcome`` holds the DB before and after, every tool call and the assistant's texts.
* ``oracle(task) -> list[str]``: assistant turns that solve the task, written with ``call`` and ``say``.

The env keeps the target's tools (names and argument schemas unchanged, optionally a subset through
``tool_names``), its policy text as the system prompt and its message protocol (``ToolUseEnv``). The
user says ``task.opening``, answers successive plain-text turns with ``task.user_replies`` and then
stops. Nothing in a module is trusted: ``trace_envs.synthesis.llm.validate`` checks it statically and
in a confined subprocess before anything imports it in-process.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.time_limit import CallTimeout, time_limit
from trace_envs.core.tool_env import STOP_TOKEN, Episode, Score, ToolUseEnv, UserReply
from trace_envs.core.tools import ToolBox, ToolSpec
from trace_envs.domains import get_domain

NORMAL_ENDINGS = frozenset({"user_stop", "agent_stop", "transfer"})
SUCCESS_REWARD = 1.0 - 1e-9
# wall-clock seconds one call of an authored method (build_task, verify, oracle) may take; the validator plays the
# oracle, do-nothing and random policies only, so a method that loops on other input would hang whoever plays it
METHOD_TIME_LIMIT_S = 10.0

__all__ = ["CallRecord", "CapabilityEnv", "Outcome", "STOP_TOKEN", "TaskSpec", "ToolBox", "ToolSpec", "call", "say"]


def call(name: str, **arguments: Any) -> str:
    """An assistant turn that calls tool ``name`` with ``arguments`` (Qwen/Hermes format)."""
    return format_tool_call(name, arguments)


def say(text: str) -> str:
    """An assistant turn of plain text to the user (``say(STOP_TOKEN)`` ends the episode)."""
    return str(text)


@dataclass
class TaskSpec:
    """One task: what the user says, and the JSON-able ground truth the verifier and oracle use."""

    opening: str
    facts: dict[str, Any] = field(default_factory=dict)
    user_replies: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CallRecord:
    name: str
    arguments: dict[str, Any]
    error: bool


@dataclass
class Outcome:
    """A finished episode as ``verify`` sees it."""

    db: dict[str, Any]
    initial_db: dict[str, Any]
    calls: list[CallRecord]
    texts: list[str]
    termination: str

    def called(self, name: str) -> list[CallRecord]:
        """The successful calls of tool ``name``."""
        return [c for c in self.calls if c.name == name and not c.error]

    def said(self, needle: str) -> bool:
        """Whether some assistant text contains ``needle`` (case-insensitive)."""
        return any(needle.lower() in t.lower() for t in self.texts)


def _limited(method: Any, *args: Any) -> Any:
    """``method(*args)`` under :data:`METHOD_TIME_LIMIT_S`; running past it is a ``TimeoutError`` (an env error
    that ends only this episode wherever episodes are played)."""
    try:
        with time_limit(METHOD_TIME_LIMIT_S, getattr(method, "__qualname__", "an authored method")):
            return method(*args)
    except CallTimeout as exc:
        raise TimeoutError(str(exc)) from None


class _User:
    def __init__(self, replies: list[str]):
        self.replies = list(replies)

    def reply(self) -> UserReply:
        if self.replies:
            return UserReply(self.replies.pop(0))
        return UserReply(STOP_TOKEN, stop=True)


class _CapabilityEpisode(Episode):
    def __init__(self, env: "CapabilityEnv", rng: np.random.Generator):
        self.env = env
        self.db = env.domain.world_db(env.domain.new_world(rng))
        task = _limited(env.build_task, self.db, rng)
        if not isinstance(task, TaskSpec):
            raise TypeError(f"build_task must return a TaskSpec, got {type(task).__name__}")
        self.task = task
        self.initial_db = copy.deepcopy(self.db)
        self.tools = env.tools(self.db)
        self.system_prompt = env.domain.policy
        self.user = _User(task.user_replies)
        self.calls: list[CallRecord] = []
        self.task_info = {"capability": env.capability, "domain": env.domain_name, "generator": "llm",
                          "facts": json.loads(json.dumps(task.facts, default=str))}

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.task.opening}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return self.user.reply()

    def on_tool_call(self, name: str, arguments: dict[str, Any], error: bool) -> None:
        self.calls.append(CallRecord(name, copy.deepcopy(arguments), error))

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        if termination not in NORMAL_ENDINGS:
            return Score(0.0, False)
        texts = [m.get("content") or "" for m in transcript if m.get("role") == "assistant"]
        outcome = Outcome(self.db, self.initial_db, list(self.calls), [t for t in texts if t.strip()], termination)
        reward = float(_limited(self.env.verify, self.task, outcome))
        return Score(reward, reward >= SUCCESS_REWARD, {"verifier": reward})


class CapabilityEnv(ToolUseEnv):
    """Base class of an LLM-written capability env over a domain's tools (see the module docstring)."""

    capability: str = ""
    tool_names: tuple[str, ...] | None = None  # a subset of the domain's tools to expose (None: all of them)
    default_max_steps: int = 12

    def __init__(self, domain: str = "retail-sim", max_steps: int | None = None, max_errors: int = 5,
                 render_mode: str | None = None):
        super().__init__(max_steps=max_steps or self.default_max_steps, max_errors=max_errors,
                         render_mode=render_mode)
        self.domain_name = domain
        self.domain = get_domain(domain)
        self.current_task: TaskSpec | None = None

    # -- to implement ---------------------------------------------------------------------------
    def build_task(self, db: dict[str, Any], rng: np.random.Generator) -> TaskSpec:
        raise NotImplementedError("an authored env must define build_task(db, rng)")

    def verify(self, task: TaskSpec, outcome: Outcome) -> float:
        raise NotImplementedError("an authored env must define verify(task, outcome)")

    def oracle(self, task: TaskSpec) -> list[str]:
        raise NotImplementedError("an authored env must define oracle(task)")

    # -- may be overridden ----------------------------------------------------------------------
    def tools(self, db: dict[str, Any]) -> ToolBox:
        """The target's tools bound to ``db`` (the subset ``tool_names`` when set)."""
        box = self.domain.build_tools(db)
        if self.tool_names is None:
            return box
        unknown = [n for n in self.tool_names if n not in box.tools]
        if unknown:
            raise ValueError(f"tool_names {unknown} are not tools of domain {self.domain_name!r}")
        return ToolBox({n: box.tools[n] for n in self.tool_names})

    # -- ToolUseEnv ------------------------------------------------------------------------------
    def _new_episode(self, options: dict[str, Any] | None) -> Episode:
        episode = _CapabilityEpisode(self, self.np_random)
        self.current_task = episode.task
        return episode

    def oracle_turns(self) -> list[str]:
        """The oracle's turns for the current task, ending with a stop turn."""
        if self.current_task is None:
            raise RuntimeError("call reset() first")
        turns = [str(t) for t in _limited(self.oracle, self.current_task)]
        return [*turns, say(STOP_TOKEN)]
