"""``ToolUseEnv``: the base class of every multi-turn tool-use text env (DESIGN.md §3).

A subclass provides an episode (``_new_episode``): system prompt, tools, the opening messages, a
user that answers plain-text assistant turns, and the final scoring. The base class owns the
message protocol, parsing, error accounting, stop tokens and truncation, so that every env behaves
the same way for the rollout backends.

Protocol per ``step(action)``:
* the action (raw text or a message dict) is parsed by ``trace_envs.core.parsing``;
* tool calls run in order and each yields a ``tool`` message; malformed calls (and calls a subclass
  refuses in ``check_call``), unknown tools and bad arguments yield ``Error: ...`` tool messages and
  count as errors;
* plain text goes to the user, whose reply is the observation; ``###STOP###`` from the user ends the
  episode (user stop), as does ``###STOP###`` in the assistant's text (agent stop) and a call to
  ``transfer_to_human_agents`` (transfer);
* ``max_errors`` errors or ``max_steps`` assistant turns truncate the episode (reward 0); both are at least 1;
* a tool message's content is cut to ``MAX_TOOL_MESSAGE_CHARS`` and an agent-chosen tool name echoed in its
  ``name`` to ``NAME_ECHO_CHARS`` (so one hostile call cannot outgrow an observation's shared-memory slot);
* calls without an id get ``call_<n>``, numbered through the episode, skipping any id the agent chose itself (an
  agent id longer than ``NAME_ECHO_CHARS`` is dropped by the parser, so it gets one too);
* a turn runs at most ``MAX_CALLS_PER_TURN`` calls (malformed ones included; the rest are one ``Error:`` message),
  and when a step's messages would still outgrow the observation space's ``max_bytes`` (the async vector env's
  shared-memory slot) every tool message is cut to an equal share of it.
The reward is given once, when the episode terminates.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from trace_envs.core.kwarg_checks import integer
from trace_envs.core.parsing import ParsedTurn, ToolCall, assistant_message, parse_action, short_name
from trace_envs.core.spaces import MessageList, MessageText
from trace_envs.core.tools import ToolBox

STOP_TOKEN = "###STOP###"
TRANSFER_TOKEN = "###TRANSFER###"
TRANSFER_TOOL = "transfer_to_human_agents"
# The longest tool message content the env emits (a longer one keeps its head and a note). Real outputs stay far
# below it (tau2's largest, a one-stop flight search, is ~25k characters; the SWE tools cut theirs at 10-16k).
MAX_TOOL_MESSAGE_CHARS = 65_536
MAX_CALLS_PER_TURN = 32  # a real turn makes a handful; hundreds of calls are a hostile or degenerate turn
_JSON_BYTES_PER_CHAR = 6  # the most one character takes in JSON text (a control character as \uXXXX)


@dataclass
class UserReply:
    text: str
    stop: bool = False


@dataclass
class Score:
    """Final scoring of an episode."""

    reward: float
    success: bool
    breakdown: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class Episode(ABC):
    """One episode's world: the part a concrete env supplies."""

    system_prompt: str
    tools: ToolBox
    task_info: dict[str, Any]

    @abstractmethod
    def opening(self) -> list[dict[str, Any]]:
        """The messages the agent sees first (typically the user's request)."""

    @abstractmethod
    def user_reply(self, assistant_text: str) -> UserReply:
        """The user's answer to a plain-text assistant turn."""

    @abstractmethod
    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        """Final reward; called once, when the episode terminates normally."""

    def on_tool_call(self, name: str, arguments: dict[str, Any], error: bool) -> None:
        """Hook for bookkeeping (e.g. which ids the agent used); default does nothing."""

    def diagnostics(self) -> dict[str, Any]:
        """Facts about the agent's behaviour reported at the end of *every* episode, truncated ones too."""
        return {}


class ToolUseEnv(gym.Env, ABC):
    """Multi-turn tool-use env over chat messages. Subclasses implement ``_new_episode``."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, max_steps: int = 30, max_errors: int = 5, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.max_steps = integer("max_steps", max_steps, 1)
        self.max_errors = integer("max_errors", max_errors, 1)
        self.render_mode = render_mode
        self.action_space = MessageText()
        self.observation_space = MessageList()
        self._episode: Episode | None = None
        self._transcript: list[dict[str, Any]] = []
        self._steps = 0
        self._errors = 0
        self._format_ok_turns = 0
        self._done = False
        self._call_counter = 0
        self._used_ids: set[str] = set()

    # -- to implement ---------------------------------------------------------------------------
    @abstractmethod
    def _new_episode(self, options: dict[str, Any] | None) -> Episode:
        """Build an episode from ``self.np_random`` (already seeded by ``reset``)."""

    def check_call(self, call: ToolCall) -> str | None:
        """An error message to refuse a well-formed call before it runs or enters the transcript
        (as a malformed call would be); default: every call is let through."""
        return None

    # -- gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._episode = self._new_episode(options)
        self._steps = 0
        self._errors = 0
        self._format_ok_turns = 0
        self._call_counter = 0
        self._used_ids = set()
        self._done = False
        obs = self._episode.opening()
        self._transcript = [{"role": "system", "content": self._episode.system_prompt}, *obs]
        info = {
            "system_prompt": self._episode.system_prompt,
            "tools": self._episode.tools.schemas(),
            "task": self._episode.task_info,
        }
        return obs, info

    def step(self, action: Any):
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("episode is over; call reset()")
        self._steps += 1
        turn = self._screen(parse_action(action))
        if turn.format_ok:
            self._format_ok_turns += 1
        self._transcript.append(assistant_message(turn))
        obs, termination = self._respond(turn)
        obs = self._fit_slot(obs)
        self._transcript.extend(obs)

        reward, terminated, truncated = 0.0, False, False
        info: dict[str, Any] = {"steps": self._steps, "errors": self._errors, "format_ok": turn.format_ok}
        if termination is not None:
            terminated = True
        elif self._errors >= self.max_errors:
            truncated, termination = True, "too_many_errors"
        elif self._steps >= self.max_steps:
            truncated, termination = True, "max_steps"
        if termination is not None:
            self._done = True
            info.update(self._final_info(termination, terminated))
            reward = float(info["reward"])
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"{m['role']}: {m.get('content', '')}" for m in self._transcript)

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Every message so far, system prompt first, in OpenAI format."""
        return list(self._transcript)

    # -- internals -------------------------------------------------------------------------------
    def _next_call_id(self) -> str:
        self._call_counter += 1
        while f"call_{self._call_counter}" in self._used_ids:  # an id the agent chose: never reuse it
            self._call_counter += 1
        call_id = f"call_{self._call_counter}"
        self._used_ids.add(call_id)
        return call_id

    def _screen(self, turn: ParsedTurn) -> ParsedTurn:
        kept = []
        for call in turn.tool_calls:
            refusal = self.check_call(call)
            if refusal is None:
                kept.append(call)
            else:
                turn.errors.append(refusal)
        excess = len(turn.errors) + len(kept) - MAX_CALLS_PER_TURN
        if excess > 0:
            turn.errors = turn.errors[:MAX_CALLS_PER_TURN - 1]
            kept = kept[:MAX_CALLS_PER_TURN - 1 - len(turn.errors)]
            turn.errors.append(f"{excess + 1} tool calls of this turn were not run: a turn runs at most "
                               f"{MAX_CALLS_PER_TURN}")
        turn.tool_calls = kept
        return turn

    def _fit_slot(self, obs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``obs`` with its tool messages cut to equal shares when its JSON outgrows ``max_bytes``."""
        limit = getattr(self.observation_space, "max_bytes", None)
        tools = [m for m in obs if m["role"] == "tool"]
        if limit is None or not tools or len(json.dumps(obs, ensure_ascii=False).encode("utf-8")) <= limit:
            return obs
        rest = sum(len(json.dumps(m, ensure_ascii=False).encode("utf-8")) + 2 for m in obs) - sum(
            len(json.dumps(m["content"], ensure_ascii=False).encode("utf-8")) for m in tools)
        note = "\n... [{:,} characters cut: this step's tool messages share the observation's size limit]"
        budget = (limit - rest) // len(tools) - len(note) - 16  # bytes per message: its note, a count of 16 digits
        share = max(0, budget // _JSON_BYTES_PER_CHAR)
        for message in tools:
            cut = len(message["content"]) - share
            if cut > 0:
                message["content"] = message["content"][:share] + note.format(cut)
        return obs

    def _respond(self, turn: ParsedTurn) -> tuple[list[dict[str, Any]], str | None]:
        episode = self._episode
        assert episode is not None
        obs: list[dict[str, Any]] = []
        self._used_ids.update(call.id for call in turn.tool_calls if call.id)
        for error in turn.errors:
            self._errors += 1
            obs.append(_tool_message(self._next_call_id(), "invalid_tool_call", f"Error: {error}"))
        transferred = False
        for call in turn.tool_calls:
            call.id = call.id or self._next_call_id()
            result = episode.tools.call(call.name, call.arguments)
            if result.error:
                self._errors += 1
            episode.on_tool_call(call.name, call.arguments, result.error)
            obs.append(_tool_message(call.id, call.name, result.output))
            transferred = transferred or (call.name == TRANSFER_TOOL and not result.error)
        # Keep the recorded assistant message's call ids in sync with the tool messages.
        if turn.tool_calls:
            for entry, call in zip(self._transcript[-1].get("tool_calls", []), turn.tool_calls):
                entry["id"] = call.id
        if transferred:
            return obs, "transfer"
        if STOP_TOKEN in turn.content:
            return obs, "agent_stop"
        if turn.tool_calls or turn.errors:
            return obs, None
        if not turn.content:
            self._errors += 1
            obs.append({"role": "user", "content": "Error: empty message; say something or call a tool."})
            return obs, None
        reply = episode.user_reply(turn.content)
        obs.append({"role": "user", "content": reply.text})
        return obs, ("user_stop" if reply.stop or STOP_TOKEN in reply.text else None)

    def _final_info(self, termination: str, terminated: bool) -> dict[str, Any]:
        episode = self._episode
        assert episode is not None
        info: dict[str, Any] = {
            "termination": termination,
            "format_valid_fraction": self._format_ok_turns / max(1, self._steps),
            **episode.diagnostics(),
        }
        if terminated:
            score = episode.score(self._transcript, termination)
            info.update(score.info)
            info.update(reward=score.reward, success=score.success, reward_breakdown=score.breakdown)
        else:
            info.update(reward=0.0, success=False, reward_breakdown={})
        info["transcript"] = list(self._transcript)  # TerminalInfo: the episode's messages travel in info
        return info


def _tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    """A ``tool`` message of bounded size: ``name`` through ``short_name``, ``content`` at most
    ``MAX_TOOL_MESSAGE_CHARS`` (a longer one keeps its head and a note of the cut)."""
    if len(content) > MAX_TOOL_MESSAGE_CHARS:
        head = MAX_TOOL_MESSAGE_CHARS - 100  # room for the note
        content = (f"{content[:head]}\n... [{len(content) - head:,} characters cut: a tool message holds at most "
                   f"{MAX_TOOL_MESSAGE_CHARS:,}]")
    return {"role": "tool", "tool_call_id": call_id, "name": short_name(name), "content": content}
