"""A minimal OpenAI-compatible chat client with an on-disk response cache (stdlib only).

HTTP, retries and backoff live in ``trace_train.rollout.openai_http`` (shared with the ``openai``
rollout backend).

Every request body is hashed (sha256 of its canonical JSON); the answer is stored under
``cache_dir/<hash>.json`` so that rerunning an analysis makes no request at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_train.rollout.openai_http import JSONHTTPClient, ServerError
from trace_train.trajectory import write_json_atomic

logger = logging.getLogger(__name__)


class LLMError(ServerError):
    """The endpoint could not be reached or kept failing after the configured retries."""


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass
class ChatClient:
    base_url: str
    model: str
    api_key: str = "EMPTY"
    temperature: float = 0.7
    max_tokens: int = 4096
    timeout: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0
    cache_dir: str | Path | None = None
    requests_made: int = field(default=0, init=False)
    cache_hits: int = field(default=0, init=False)

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

    def _cache_path(self, key: str) -> Path | None:
        return Path(self.cache_dir) / f"{key}.json" if self.cache_dir else None

    def complete(self, messages: list[dict[str, str]], seed: int | None = None) -> str:
        """The assistant text for ``messages``; served from the cache when the same request was made."""
        body = self.body(messages, seed)
        key = request_hash(body)
        path = self._cache_path(key)
        if path is not None and path.exists():
            try:
                cached = json.loads(path.read_text(encoding="utf-8"))
                self.cache_hits += 1
                return str(cached["content"])
            except (json.JSONDecodeError, KeyError):
                logger.warning("corrupt cache entry %s; asking again", path)
        content = self._post(body)
        if path is not None:
            write_json_atomic(path, {"request_sha256": key, "request": body, "content": content})
        return content

    def _post(self, body: dict[str, Any]) -> str:
        http = JSONHTTPClient(api_key=self.api_key, timeout=self.timeout, retries=self.retries,
                              backoff_s=self.backoff_s)
        try:
            return http.post(self.base_url.rstrip("/") + "/chat/completions", body, _chat_content,
                             retry_bad_response=True, error=LLMError)
        finally:
            self.requests_made += http.requests_made


def _chat_content(payload: Any) -> str:
    return str(payload["choices"][0]["message"]["content"] or "")
