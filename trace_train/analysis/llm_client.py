"""A minimal OpenAI-compatible chat client with an on-disk cache of validated answers (stdlib only).

HTTP, the total per-request deadline, retries and backoff live in
``trace_envs.llm_http`` (shared with the ``openai`` rollout backend and the τ² user).

The cache key is the sha256 of the canonical JSON of the endpoint (base URL) and the request body
(which holds the model), so the same prompt sent to two servers makes two entries. An answer is
stored under ``cache_dir/<key>.json`` only once the caller's ``parse`` accepted it: a rerun against
a fixed server asks again instead of replaying a bad answer. An unreadable entry (not UTF-8, not a
JSON object, truncated) is ignored with a warning and asked again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from trace_envs.llm_http import JSONHTTPClient, ServerError
from trace_envs.records import write_json_atomic

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LLMError(ServerError):
    """The endpoint could not be reached, kept failing after the configured retries, or kept giving
    answers the caller could not use."""


class InvalidAnswer(ValueError):
    """The endpoint answered, but ``parse`` rejected the answer (it is not cached)."""

    def __init__(self, message: str, content: str) -> None:
        super().__init__(message)
        self.content = content


def request_hash(body: dict[str, Any], endpoint: str = "") -> str:
    """The cache key of ``body`` sent to ``endpoint``."""
    doc = {"endpoint": endpoint, "body": body}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _non_empty(content: str) -> str:
    if not content.strip():
        raise ValueError("empty answer")
    return content


@dataclass
class ChatClient:
    base_url: str
    model: str
    api_key: str = "EMPTY"
    temperature: float = 0.7
    max_tokens: int = 4096
    timeout: float = 120.0  # total seconds per HTTP attempt (connect + the whole response)
    retries: int = 3
    backoff_s: float = 1.0
    cache_dir: str | Path | None = None
    requests_made: int = field(default=0, init=False)
    cache_hits: int = field(default=0, init=False)
    rejected: int = field(default=0, init=False)  # answers ``parse`` refused (never cached)

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/")

    def body(self, messages: list[dict[str, str]], seed: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        return body

    def cache_note(self) -> str:
        """Where answers are cached, for error messages."""
        if not self.cache_dir:
            return "no answer cache"
        return (f"answer cache {self.cache_dir} ({self.cache_hits} hits this session; "
                "delete entries there to ask again)")

    def _cache_path(self, key: str) -> Path | None:
        return Path(self.cache_dir) / f"{key}.json" if self.cache_dir else None

    def complete(self, messages: list[dict[str, str]], seed: int | None = None) -> str:
        """The (non-empty) assistant text for ``messages``; see :meth:`ask`."""
        return self.ask(messages, _non_empty, seed)

    def ask(self, messages: list[dict[str, str]], parse: Callable[[str], T], seed: int | None = None) -> T:
        """``parse(answer)`` for ``messages``, served from the cache when the same endpoint was asked the same.

        ``parse`` validates: when it raises ``ValueError`` the answer is not cached and
        :class:`InvalidAnswer` is raised. HTTP failures raise :class:`LLMError`.
        """
        body = self.body(messages, seed)
        key = request_hash(body, self.endpoint)
        path = self._cache_path(key)
        cached = _read_entry(path) if path is not None else None
        if cached is not None:
            try:
                value = parse(cached)
            except ValueError as exc:
                logger.warning("cache entry %s no longer validates (%s); asking again", path, exc)
            else:
                self.cache_hits += 1
                return value
        content = self._post(body)
        try:
            value = parse(content)
        except ValueError as exc:
            self.rejected += 1
            raise InvalidAnswer(f"{self.endpoint}: answer rejected ({exc}); not cached", content) from exc
        if path is not None:
            try:
                write_json_atomic(path, {"request_sha256": key, "endpoint": self.endpoint, "request": body,
                                         "content": content})
            except OSError as exc:  # the answer is still good; only a rerun loses it
                logger.warning("cannot write cache entry %s (%s); the answer is not cached", path, exc)
        return value

    def _post(self, body: dict[str, Any]) -> str:
        http = JSONHTTPClient(api_key=self.api_key, timeout=self.timeout, retries=self.retries,
                              backoff_s=self.backoff_s)
        try:
            return http.post(self.endpoint + "/chat/completions", body, _chat_content,
                             retry_bad_response=True, error=LLMError)
        except LLMError as exc:
            raise LLMError(f"{exc} [{self.cache_note()}]", exc.url, exc.status, exc.detail) from exc
        finally:
            self.requests_made += http.requests_made


def _read_entry(path: Path) -> str | None:
    """The cached answer text at ``path``; ``None`` (with a warning when it exists but is unusable)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("corrupt cache entry %s (%s); asking again", path, exc)
        return None
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        logger.warning("corrupt cache entry %s (%s: %s); asking again", path, type(exc).__name__, exc)
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
        logger.warning("corrupt cache entry %s (not an object with a text 'content'); asking again", path)
        return None
    return entry["content"]


def _chat_content(payload: Any) -> str:
    return str(payload["choices"][0]["message"]["content"] or "")
