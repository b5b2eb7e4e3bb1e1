"""Shared machinery of the capability env families: the episode over a domain, the family env base
class, what a refusal must rest on (:func:`checked_at`: the agent read the record it refuses about) and the
explained-refusal check. The refusal detector itself is ``trace_envs.core.communication.is_refusal`` (re-exported
here), shared with the retail-sim target.

Every family episode keeps the target's tools, policy and message protocol (the domain's ToolBox,
policy text and scripted user) and annotates ``info['task']`` with the domain's task annotation plus
``capability``, ``family``, ``case``, ``gold``, ``difficulty`` and ``hazards`` (per expert knob, how
many independent chances the task gives a policy lacking that capability to fail; the family
expert uses it, see ``trace_envs.families.experts``).

Hints (paper §3.5, ``trace_envs.hints``): ``reset(options={"hint": True})`` appends the family's
capability hint to the system prompt; the task drawn from the seed is the same with or without it.
"""

from __future__ import annotations

import copy
import json
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_envs.core.communication import is_refusal, mentions  # noqa: F401  (is_refusal: re-exported)
from trace_envs.core.parsing import ToolCall
from trace_envs.core.tool_env import Episode, Score, ToolUseEnv, UserReply
from trace_envs.domains import Domain, Request, get_domain
from trace_envs.domains.errors import DrawFailed
from trace_envs.hints import CAPABILITY_HINTS, hint_requested, with_hint
from trace_envs.splits import split_of
from trace_envs.twins import twin_requested

MAX_DRAWS = 200
NORMAL_ENDINGS = frozenset({"user_stop", "agent_stop", "transfer"})
IDENTITY_CASES = frozenset({"authentication"})  # refusal cases whose failed precondition is the user's identity


def tool_results(transcript: list[dict[str, Any]]) -> list[tuple[int, str, Any, str]]:
    """``(index, tool name, decoded arguments, output)`` of every tool message of ``transcript`` that answers a call of
    an assistant message (matched by ``tool_call_id``; ``Error:`` messages of malformed calls answer none)."""
    calls: dict[str, list[tuple[str, Any]]] = {}
    found = []
    for index, message in enumerate(transcript):
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except (json.JSONDecodeError, TypeError):
                    arguments = {}
                calls.setdefault(str(call.get("id")), []).append((str(function.get("name")), arguments))
        elif message.get("role") == "tool":
            queue = calls.get(str(message.get("tool_call_id")))
            if queue:
                name, arguments = queue.pop(0)
                found.append((index, name, arguments, str(message.get("content") or "")))
    return found


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [s for v in values for s in _strings(v)]


def checked_at(transcript: list[dict[str, Any]], request: Request, write_tools: frozenset[str],
               identify: tuple[str, dict[str, Any]] | None = None) -> int | None:
    """Where (the transcript index of the tool message) the agent first read what a refusal of ``request`` rests on,
    or ``None`` when it never did. The rule every domain's refusal cases share: a successful call to a non-write
    tool whose arguments name the entity (``request.entity_id``) and whose result returns it (the order, the
    reservation). A case whose precondition is the user's identity (``IDENTITY_CASES``: τ²'s authentication) is
    read as well by the failed identification lookup the user's words call for: ``identify`` (the domain's
    identification call, tool and arguments), made with those arguments and answered ``Error:``."""
    entity = request.entity_id
    for index, name, arguments, output in tool_results(transcript):
        if name in write_tools:
            continue
        failed = output.startswith("Error")
        if not failed and entity in _strings(arguments) and entity in output:
            return index
        if (failed and identify is not None and request.case in IDENTITY_CASES and name == identify[0]
                and _same_arguments(arguments, identify[1])):
            return index
    return None


def _same_arguments(given: Any, stated: dict[str, Any]) -> bool:
    if not isinstance(given, dict) or set(given) != set(stated):
        return False
    return all(str(given[k]).strip().lower() == str(v).strip().lower() for k, v in stated.items())


def refusal_explained(text: str, request: Request) -> bool:
    """A refusal is explained when it names the entity and one of the request's reason words."""
    low = text.lower()
    return mentions(text, request.entity_id) and any(w.lower() in low for w in request.reason_words)


@dataclass
class FamilyTask:
    """What a family builds per episode."""

    case: str
    requests: list[Request]
    difficulty: dict[str, Any]
    hazards: dict[str, int]


class FamilyEpisode(Episode):
    """One family episode on a domain world; the family env supplies scoring."""

    def __init__(self, env: "FamilyEnv", world: Any, task: FamilyTask):
        self.env = env
        self.domain: Domain = env.domain
        self.world = world
        self.task = task
        self.requests = task.requests
        self.db = self.domain.world_db(world)
        snapshot = getattr(self.domain, "snapshot", None)  # optional domain hook (τ²: copies touched records)
        self.initial_db = snapshot(self.db) if snapshot else copy.deepcopy(self.db)
        self.tools = self.domain.build_tools(self.db)
        self.system_prompt = self.domain.policy
        self.user = self.domain.make_user(world, self.requests)
        self.write_calls: list[dict[str, Any]] = []
        self.gold_actions = [a for r in self.requests for a in r.gold_actions]
        self.gold_db = self.domain.replay(self.initial_db, self.gold_actions)
        self.task_info = {
            **self.domain.annotation(world, self.requests),
            "capability": env.capability,
            "family": type(env).__name__,
            "case": task.case,
            "gold": {"actions": [[n, a] for n, a in self.gold_actions],
                     "communicate": [s for r in self.requests for s in r.communicate],
                     "requests": [{"kind": r.kind, "entity_id": r.entity_id, "case": r.case, **r.details}
                                  for r in self.requests]},
            "difficulty": dict(task.difficulty),
            "hazards": dict(task.hazards),
        }
        self.prefill: list[dict[str, Any]] | None = None

    def opening(self) -> list[dict[str, Any]]:
        if self.prefill is not None:
            return copy.deepcopy(self.prefill)
        return [{"role": "user", "content": self.user.opening()}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return self.user.reply(assistant_text)

    def on_tool_call(self, name: str, arguments: dict[str, Any], error: bool) -> None:
        if name in self.domain.write_tools:
            self.write_calls.append({"name": name, "arguments": arguments, "error": error})

    def scoring_gold_db(self) -> Any:
        """The gold end state this episode is judged against: the replay of the domain's ``scoring_gold`` (the
        requests' gold, with any choice the user left open taken as the agent made it, e.g. retail's payment method
        of an exchange); ``gold_db`` itself when that is the requests' own gold."""
        actions = self.domain.scoring_gold(self.requests, self.write_calls)
        if actions == self.gold_actions:
            return self.gold_db
        return self.domain.replay(self.initial_db, actions)

    def db_matches_gold(self) -> bool:
        gold_db = self.scoring_gold_db()
        same_state = getattr(self.domain, "same_state", None)  # optional hook: equal hashes, cheaper
        if same_state is not None:
            return bool(same_state(self.db, gold_db))
        return self.domain.db_hash(self.db) == self.domain.db_hash(gold_db)

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        if termination not in NORMAL_ENDINGS:
            return Score(0.0, False, {}, {"writes": self.write_calls})
        score = self.env.score_episode(self, transcript)
        score.info.setdefault("writes", self.write_calls)
        score.info.setdefault("case", self.task.case)
        return score


class FamilyEnv(ToolUseEnv):
    """Base of the four families: ``domain=`` picks the domain; subclasses build tasks and score."""

    capability: str = ""
    has_twins: bool = False  # build_task honours reset(options={"twin": True}) (trace_envs.twins)

    def __init__(self, domain: str = "retail-sim", max_steps: int = 30, max_errors: int = 5,
                 render_mode: str | None = None):
        super().__init__(max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        self.domain_name = domain
        self.domain = get_domain(domain)
        self._hinted = self._twin = False
        self._split = "train"

    def domain_setting(self, name: str, value: Any, default: Any) -> Any:
        """The setting ``name`` as this env's domain realizes it: ``value`` (``None``: the family's ``default``),
        or the domain's fixed value when it does not vary the setting; ``ValueError`` for an explicit value the
        domain cannot honour."""
        if value is None and name in self.domain.fixed_settings:
            return self.domain.fixed_settings[name]
        value = default if value is None else value
        problem = self.domain.setting_problem(name, value)
        if problem is not None:
            raise ValueError(f"{self.capability}: {problem}")
        return value

    def check_call(self, call: ToolCall) -> str | None:
        return self.domain.refuse_call(call.name, call.arguments)

    @abstractmethod
    def build_task(self, world: Any, rng: np.random.Generator, options: dict[str, Any] | None) -> FamilyTask:
        """Draw this episode's requests on ``world``."""

    @abstractmethod
    def score_episode(self, episode: FamilyEpisode, transcript: list[dict[str, Any]]) -> Score:
        """Reward of a normally-terminated episode."""

    def prepare(self, episode: FamilyEpisode, rng: np.random.Generator) -> None:  # noqa: B027
        """Hook run after the episode is built (e.g. pre-filled messages)."""

    def _new_episode(self, options: dict[str, Any] | None) -> FamilyEpisode:
        if twin_requested(options) and not self.has_twins:
            raise ValueError(f"{self.capability} has no counterfactual twin of a task (trace_envs.twins)")
        rng = self.np_random
        for _ in range(MAX_DRAWS):  # a world that cannot host the task is redrawn from the same rng
            world = self.domain.new_world(rng, split=self._split)
            try:
                task = self.build_task(world, rng, options)
                break
            except DrawFailed:
                continue
        else:
            raise RuntimeError(f"{self.domain_name}: no world hosts a {self.capability} task in {MAX_DRAWS} draws")
        episode = FamilyEpisode(self, world, task)
        self.prepare(episode, rng)
        self._twin = twin_requested(options)
        self._hinted = hint_requested(options)
        if self._hinted:
            episode.system_prompt = with_hint(episode.system_prompt, self.hint)
        return episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:  # an unseeded reset goes on in the split of the last seed
            self._split = split_of(seed)
        obs, info = super().reset(seed=seed, options=options)
        info["hint"] = self.hint if self._hinted else None
        info["hint_capability"] = self.capability if self._hinted else None
        info["unhinted_system_prompt"] = self.domain.policy
        if self._twin:  # only on a twin: every other reset's info stays as it always was
            info["twin"] = True
        return obs, info

    @property
    def hint(self) -> str:
        """This family's guidance for ``reset(options={"hint": True})`` (``trace_envs.hints``)."""
        return CAPABILITY_HINTS[self.capability]


