"""HTTP requests with a total deadline (stdlib only), shared by every LLM HTTP call in the project.

``urllib``'s ``timeout`` bounds each socket operation, so a server that sends one byte every few
seconds never times out. :func:`request` bounds the whole request instead: connect, send, status
line, headers and body. Before every socket read or write the time left becomes the socket
timeout; when none is left, :class:`DeadlineExceeded` (a ``TimeoutError``) is raised.

It lives in ``trace_envs`` so that both the env side (the τ² LLM user) and ``trace_train`` (the
shared JSON client of the rollout backend and the LLM labeler) can use it.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any


class DeadlineExceeded(TimeoutError):
    """No complete response arrived within the request's total deadline."""


@dataclass(frozen=True)
class Response:
    """A complete HTTP response (any status: 4xx/5xx are returned, not raised)."""

    status: int
    reason: str
    headers: Message
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Deadline:
    def __init__(self, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.end = time.monotonic() + self.timeout

    def expired(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"timed out: no complete response within the {self.timeout:g} s deadline")

    def remaining(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left


class _DeadlineReader(io.RawIOBase):
    """The socket's raw reader, with the time left set as the socket timeout before every read."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._deadline.remaining())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineSocket:
    """A connected (plain or TLS) socket whose reads and writes share one deadline."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str = "rb", *args: Any, **kw: Any) -> io.BufferedReader:
        if mode != "rb":  # http.client only reads responses through makefile("rb")
            raise ValueError(f"unsupported makefile mode {mode!r}")
        # an unbuffered SocketIO keeps the socket's reference count, so closing the connection
        # before the body is read (as urllib does) leaves the response readable
        raw = self._sock.makefile("rb", buffering=0)
        return io.BufferedReader(_DeadlineReader(raw, self._sock, self._deadline))

    def sendall(self, data: Any, *args: Any) -> None:
        self._sock.settimeout(self._deadline.remaining())
        self._sock.sendall(data, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineConnection:
    """Mixin for ``http.client`` connections: connect within the time left, then wrap the socket."""

    def __init__(self, *args: Any, deadline: _Deadline, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._deadline = deadline

    def connect(self) -> None:
        self.timeout = self._deadline.remaining()  # bounds connect, proxy tunnel and TLS handshake
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _HTTPConnection(_DeadlineConnection, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_DeadlineConnection, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPConnection, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self._deadline), req,
                            context=self._context)


def request(method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None,
            timeout: float = 120.0) -> Response:
    """One HTTP request that completes (connect to last body byte) within ``timeout`` seconds.

    Returns the response whatever its status. Raises :class:`DeadlineExceeded` when time runs out,
    ``urllib.error.URLError`` / ``OSError`` / ``http.client.HTTPException`` when the connection fails.
    Proxies from the environment are honoured, as with ``urllib.request.urlopen``.
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"only http:// and https:// URLs are supported, got {url!r}")
    deadline = _Deadline(timeout)
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline))
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        try:
            with opener.open(req, timeout=deadline.remaining()) as resp:
                return Response(resp.status, resp.reason, resp.headers, resp.read())
        except urllib.error.HTTPError as exc:
            with exc:
                body = exc.read()
            return Response(exc.code, str(exc.reason), exc.headers, body)
    except DeadlineExceeded:
        raise
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise deadline.expired() from exc
        raise
    except TimeoutError as exc:  # a socket timeout: it was set to the time left, so that ran out
        raise deadline.expired() from exc
