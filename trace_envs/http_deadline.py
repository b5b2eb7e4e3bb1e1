"""HTTP requests with a total deadline (stdlib only), shared by every LLM HTTP call in the project.

``urllib``'s ``timeout`` bounds each socket operation, so a server that sends one byte every few
seconds never times out. :func:`request` bounds the whole request instead: connect, send, status
line, headers and body. Before every socket read or write the time left becomes the socket
timeout; when none is left, :class:`DeadlineExceeded` (a ``TimeoutError``) is raised.

:class:`ConnectionPool` keeps HTTP/1.1 connections open between requests to the same server (one
idle connection per host and thread-free checkout, so many threads may share a pool), each request
still bounded by its own total deadline. A kept connection the server closed meanwhile is replaced
once, transparently; URLs that go through a proxy configured for this process use the one-shot path.

It lives in ``trace_envs`` so that both the env side (the τ² LLM user) and ``trace_train`` (the
shared JSON client of the rollout backend and the LLM labeler) can use it.
"""

from __future__ import annotations

import functools
import http.client
import io
import socket
import threading
import time
import urllib.error
import urllib.parse
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


_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                 http.client.CannotSendRequest, http.client.BadStatusLine)


@dataclass
class _Kept:
    conn: http.client.HTTPConnection

    def rearm(self, deadline: _Deadline) -> None:
        """Give a kept connection (and its wrapped socket) the deadline of the next request."""
        self.conn._deadline = deadline  # type: ignore[attr-defined]
        if isinstance(self.conn.sock, _DeadlineSocket):
            self.conn.sock._deadline = deadline


class ConnectionPool:
    """Keep-alive connections per (scheme, host, port), each request bounded by a total deadline.

    ``request`` has the same contract as the module-level :func:`request`. ``max_idle`` idle
    connections are kept per server; a connection is checked out for one request at a time.
    """

    def __init__(self, max_idle: int = 8) -> None:
        self.max_idle = max_idle
        self.connections_opened = 0
        self._idle: dict[tuple[str, str, int], list[_Kept]] = {}
        self._lock = threading.Lock()

    def _checkout(self, key: tuple[str, str, int]) -> _Kept | None:
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def _checkin(self, key: tuple[str, str, int], kept: _Kept) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.max_idle:
                idle.append(kept)
                return
        kept.conn.close()

    def _open(self, scheme: str, host: str, port: int, deadline: _Deadline) -> _Kept:
        cls = _HTTPSConnection if scheme == "https" else _HTTPConnection
        with self._lock:
            self.connections_opened += 1
        return _Kept(cls(host, port, deadline=deadline))

    def close(self) -> None:
        with self._lock:
            kept = [k for idle in self._idle.values() for k in idle]
            self._idle.clear()
        for k in kept:
            k.conn.close()

    def request(self, method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float = 120.0) -> Response:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"only http:// and https:// URLs are supported, got {url!r}")
        if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
            return request(method, url, data, headers, timeout)  # proxies: the one-shot urllib path
        deadline = _Deadline(timeout)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = (parts.scheme, parts.hostname, port)
        path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        send_headers = {"Connection": "keep-alive", **(headers or {})}
        kept = self._checkout(key)
        for fresh in ((False, True) if kept is not None else (True,)):
            if fresh:
                kept = self._open(*key, deadline)
            assert kept is not None
            kept.rearm(deadline)
            try:
                kept.conn.request(method, path, body=data, headers=send_headers)
                resp = kept.conn.getresponse()
                body = resp.read()
            except _STALE_ERRORS:
                kept.conn.close()
                if fresh:
                    raise
                continue  # the server closed the kept connection meanwhile: once more on a new one
            except socket.timeout as exc:
                kept.conn.close()
                raise deadline.expired() from exc
            except BaseException:
                kept.conn.close()
                raise
            if resp.will_close:
                kept.conn.close()
            else:
                self._checkin(key, kept)
            return Response(resp.status, resp.reason, resp.headers, body)
        raise AssertionError("unreachable")
