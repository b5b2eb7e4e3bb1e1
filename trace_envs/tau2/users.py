"""Users for the τ² envs: an LLM user over any OpenAI-compatible endpoint, and a scripted user.

The LLM user gets tau2's own system prompt (its simulation guidelines followed by the task's
``<scenario>``) and a role-flipped history: the agent's texts are ``user`` turns, its own replies
``assistant`` turns; the agent's tool calls and results are not shown (as in tau2). HTTP is the one
OpenAI-compatible client of every LLM role, ``trace_envs.llm_http.JSONHTTPClient`` (stdlib; ``timeout_s``
bounds each attempt, ``retries`` extra attempts with backoff on connection errors, 5xx and 429).

The scripted user (tests, gold replay) says the scenario's reason for call and known info, answers
"yes" to confirmations and stops with ``###STOP###`` when the agent's turn asks nothing. What counts as a
confirmation is the retail-sim scripted user's rule, ``trace_envs.core.scripted.asks_to_confirm`` (a question that
says "confirm" or asks leave to act; "Would you like anything else?" is not one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from trace_envs.config_builder import build
from trace_envs.core.scripted import asks_to_confirm
from trace_envs.core.tool_env import UserReply
from trace_envs.llm_http import BadResponseError, JSONHTTPClient, ServerError

logger = logging.getLogger(__name__)

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
GREETING = "Hi! How can I help you today?"  # tau2's DEFAULT_FIRST_AGENT_MESSAGE (checked in tests)


def is_stop(text: str) -> bool:
    """tau2's ``UserSimulator.is_stop``: any of the three stop tokens."""
    return any(token in text for token in STOP_TOKENS)


class Tau2User(Protocol):
    def opening(self, greeting: str) -> str: ...

    def reply(self, assistant_text: str) -> UserReply: ...


@dataclass
class UserConfig:
    """An OpenAI-compatible chat endpoint for the LLM user."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "user-model"
    temperature: float = 0.0
    seed: int | None = None
    api_key: str = "EMPTY"
    timeout_s: float = 120.0  # total seconds per request (connect + the whole response)
    retries: int = 3  # extra attempts after a failed request (exponential backoff)
    max_tokens: int | None = None

    @classmethod
    def from_any(cls, value: "UserConfig | dict[str, Any] | None", path: str = "user_config") -> "UserConfig":
        """``value`` itself, the defaults for ``None``, or a mapping built strictly (an unknown or mistyped
        key is a :class:`~trace_envs.config_builder.ConfigError` naming it)."""
        return build(cls, value, path)


def _message_content(payload: Any) -> str:
    """The first choice's message text of a chat-completions body (``BadResponseError`` otherwise)."""
    try:
        text = payload["choices"][0]["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise BadResponseError(f"unexpected chat-completions body: {payload!r:.300}") from exc
    return str(text)


def _scenario_field(task: Any, name: str) -> str:
    instructions = getattr(task.user_scenario, "instructions", None)
    value = getattr(instructions, name, None)
    return str(value).strip() if value else ""


def user_system_prompt(task: Any) -> str:
    """tau2's user-simulator system prompt for ``task`` (guidelines + ``<scenario>``)."""
    from tau2.user.user_simulator import UserSimulator

    return UserSimulator(instructions=task.user_scenario, llm="unused").system_prompt


class LLMUser:
    """tau2-style LLM user through an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(self, task: Any, config: UserConfig, episode_seed: int | None = None):
        self.config = config
        self.seed = config.seed if config.seed is not None else episode_seed
        self.messages: list[dict[str, str]] = [{"role": "system", "content": user_system_prompt(task)}]
        self._client = JSONHTTPClient(api_key=config.api_key, timeout=config.timeout_s, retries=config.retries)

    def _complete(self) -> str:
        body: dict[str, Any] = {
            "model": self.config.model, "messages": self.messages, "temperature": self.config.temperature,
        }
        if self.seed is not None:
            body["seed"] = int(self.seed)
        if self.config.max_tokens:
            body["max_tokens"] = self.config.max_tokens
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        try:  # retried (connection errors, timeouts, 5xx, 429, a body without a message) with backoff
            text = self._client.post(url, body, _message_content, retry_bad_response=True)
        except ServerError as exc:
            raise RuntimeError(f"τ² LLM user endpoint {self.config.base_url} failed: {exc}") from exc
        if not text.strip():
            raise RuntimeError("τ² LLM user endpoint returned an empty message")
        self.messages.append({"role": "assistant", "content": text})
        return text

    def opening(self, greeting: str) -> str:
        self.messages.append({"role": "user", "content": greeting})
        return self._complete()

    def reply(self, assistant_text: str) -> UserReply:
        self.messages.append({"role": "user", "content": assistant_text})
        text = self._complete()
        return UserReply(text, stop=is_stop(text))


MAX_IDLE_REPLIES = 2


class ScriptedUser:
    """Deterministic user: states the scenario, says yes to confirmations, stops when not asked."""

    def __init__(self, task: Any):
        self.reason = _scenario_field(task, "reason_for_call")
        self.known = _scenario_field(task, "known_info")
        self.idle = 0

    def opening(self, greeting: str) -> str:
        return " ".join(part for part in ("Hi!", self.reason, self.known) if part)

    def reply(self, assistant_text: str) -> UserReply:
        if "?" not in assistant_text:
            return UserReply(STOP, stop=True)
        if asks_to_confirm(assistant_text):  # the shared rule (trace_envs.core.scripted)
            return UserReply("yes")
        self.idle += 1
        if self.idle > MAX_IDLE_REPLIES:
            return UserReply(STOP, stop=True)
        return UserReply(self.known or "I have nothing to add, please go ahead.")


USER_KINDS = ("scripted", "llm")


def make_user(kind: str, task: Any, config: UserConfig | dict[str, Any] | None, episode_seed: int | None) -> Tau2User:
    if kind == "scripted":
        return ScriptedUser(task)
    if kind == "llm":
        return LLMUser(task, UserConfig.from_any(config), episode_seed=episode_seed)
    raise ValueError(f"unknown τ² user {kind!r}; use 'scripted' or 'llm'")
