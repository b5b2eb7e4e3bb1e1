"""The one JSON-over-HTTP client for OpenAI-compatible servers (stdlib only), at the bottom of the house.

Every LLM role uses it: the ``openai`` rollout backend, the labeler and the env generator (through
``trace_train.analysis.llm_client.ChatClient``) and the τ² LLM user (``trace_envs.tau2.users``);
``trace_train.rollout.openai_http`` re-exports it. Connections are kept alive between requests
(``http_deadline.ConnectionPool``). One request = up to
``retries + 1`` attempts, each bounded by a total deadline of ``timeout`` seconds (connect and the
whole response, see ``trace_envs.http_deadline``: a server trickling bytes cannot stretch it);
connection errors, timeouts, HTTP 5xx and 429 are retried with exponential
backoff (``backoff_s * 2**attempt``, capped, a server's ``Retry-After`` honoured); any other HTTP
status fails at once. A response that is not JSON, or that ``parse`` rejects, is a *bad response*:
retried only when ``retry_bad_response`` is set. Failures raise ``error`` (a ``ServerError``
subclass) naming the URL and the last error.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, Callable, TypeVar

from trace_envs import http_deadline

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ServerError(RuntimeError):
    """An OpenAI-compatible server could not be reached or gave no valid answer."""

    def __init__(self, message: str, url: str = "", status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.detail = detail  # the server's own error text, when it sent one


class BadResponseError(ValueError):
    """Raised by ``parse`` callbacks when a response lacks what the caller needs."""


_NETWORK_ERRORS = (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, OSError)
_PARSE_ERRORS = (json.JSONDecodeError, BadResponseError, KeyError, IndexError, TypeError, ValueError)


def client_options_problem(timeout: Any, retries: Any, backoff: Any, max_backoff_s: Any = 30.0,
                           backoff_name: str = "backoff") -> str | None:
    """What is wrong with these client options (``timeout > 0``, ``retries >= 0`` an integer, backoffs
    ``>= 0``), or None; the caller adds which option set it checked."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not number(timeout) or timeout <= 0:
        return f"timeout must be a number of seconds > 0, got {timeout!r}"
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        return f"retries must be an integer >= 0, got {retries!r}"
    for name, value in ((backoff_name, backoff), ("max_backoff_s", max_backoff_s)):
        if not number(value) or value < 0:
            return f"{name} must be a number of seconds >= 0, got {value!r}"
    return None


def _identity(payload: Any) -> Any:
    return payload


@dataclass
class JSONHTTPClient:
    """Retrying JSON client; thread-safe (one instance may serve many threads)."""

    api_key: str = "EMPTY"
    timeout: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    requests_made: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pool: http_deadline.ConnectionPool = field(default_factory=http_deadline.ConnectionPool, init=False,
                                                repr=False)  # keep-alive connections, shared by threads

    def __post_init__(self) -> None:
        problem = client_options_problem(self.timeout, self.retries, self.backoff_s, self.max_backoff_s,
                                         backoff_name="backoff_s")
        if problem:
            raise ValueError(f"JSONHTTPClient: {problem}")

    def get(self, url: str, parse: Callable[[Any], T] = _identity, **kw: Any) -> T:
        return self.request("GET", url, None, parse, **kw)

    def post(self, url: str, body: dict[str, Any], parse: Callable[[Any], T] = _identity, **kw: Any) -> T:
        return self.request("POST", url, body, parse, **kw)

    def request(
        self,
        method: str,
        url: str,
        body: dict[str, Any] | None = None,
        parse: Callable[[Any], T] = _identity,
        retry_bad_response: bool = False,
        error: type[ServerError] = ServerError,
        raw: bool = False,
        retries: int | None = None,
    ) -> T:
        """``parse(payload)`` of the first good answer (``raw``: the body text, not JSON-decoded).

        ``retries`` overrides the client's retry count for this request.
        """
        retries = self.retries if retries is None else retries
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.api_key}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        last, last_status, last_detail = "no attempt made", None, ""
        for attempt in range(retries + 1):
            with self._lock:
                self.requests_made += 1
            retry_after: float | None = None
            try:
                resp = self._pool.request(method, url, data, headers, timeout=self.timeout)
            except _NETWORK_ERRORS as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
                last_status, last_detail = None, ""
            else:
                text = resp.text()
                if resp.status >= 400:
                    detail = _error_text(text, resp.reason)
                    last = f"HTTP {resp.status}: {detail}"
                    last_status, last_detail = resp.status, detail
                    if resp.status < 500 and resp.status != 429:
                        raise error(f"{method} {url}: {last}", url, resp.status, detail)
                    retry_after = _retry_after(resp.headers)
                else:
                    try:
                        return parse(text if raw else json.loads(text))
                    except _PARSE_ERRORS as exc:
                        last = f"bad response ({type(exc).__name__}: {exc}): {text[:300]!r}"
                        last_status, last_detail = None, ""
                        if not retry_bad_response:
                            raise error(f"{method} {url}: {last}", url) from exc
            if attempt < retries:
                delay = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
                if retry_after is not None:
                    delay = min(self.max_backoff_s, max(delay, retry_after))
                logger.warning("%s %s failed (attempt %d/%d): %s; retrying in %.2fs",
                               method, url, attempt + 1, retries + 1, last, delay)
                self.sleep(delay)
        raise error(f"{method} {url}: no valid answer after {retries + 1} attempts; last error: {last}", url,
                    last_status, last_detail)


def _error_text(text: str, reason: str) -> str:
    try:  # OpenAI-style {"error": {"message": ...}} or vLLM's {"message": ...}
        payload = json.loads(text)
        err = payload.get("error", payload) if isinstance(payload, dict) else payload
        message = err.get("message") if isinstance(err, dict) else None
        if message:
            return str(message)[:500]
    except (json.JSONDecodeError, AttributeError):
        pass
    return text[:500] or reason


def _retry_after(headers: Message | None) -> float | None:
    value = headers.get("Retry-After") if headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
