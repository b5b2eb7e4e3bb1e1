"""A local OpenAI-compatible chat server for tests (http.server on 127.0.0.1, ephemeral port).

Besides answers and HTTP errors it injects slow-server faults: :class:`Trickle` sends the whole
response one byte at a time, :class:`Hang` waits before answering.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Trickle:
    """Send the response (status line, headers, body of ``answer``) one byte every ``interval_s``."""

    answer: str = "{}"
    interval_s: float = 0.2


@dataclass(frozen=True)
class Hang:
    """Send nothing for ``seconds`` (or until the server stops), then answer ``answer``."""

    seconds: float = 3600.0
    answer: str = "{}"


Responder = Callable[[dict[str, Any], int], "str | tuple[int, str] | Trickle | Hang"]


def chat_payload(answer: str, model: Any = None) -> str:
    """An OpenAI chat-completion body whose assistant message is ``answer``."""
    return json.dumps({
        "id": "x", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}],
    })


def trickle_response(handler: BaseHTTPRequestHandler, status: int, data: bytes, interval_s: float,
                     stop: threading.Event) -> None:
    """Write a whole HTTP response through ``handler`` one byte every ``interval_s`` until done,
    the client hangs up or ``stop`` is set."""
    head = (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode()
    handler.close_connection = True
    try:
        for byte in head + data:
            handler.wfile.write(bytes([byte]))
            if stop.wait(interval_s):
                return
    except OSError:  # the client gave up: that is the point of the fault
        pass


class FakeLLMServer:
    """Serves ``POST /v1/chat/completions``; ``responder(body, n)`` gives the answer text of request n
    (or ``(status, raw_body)`` to fail it, or a :class:`Trickle` / :class:`Hang` fault). Every
    request body and header set is recorded."""

    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.paths.append(self.path)
                outer.headers.append(dict(self.headers))
                outer.requests.append(body)
                answer = outer.responder(body, len(outer.requests) - 1)
                if isinstance(answer, Trickle):
                    data = chat_payload(answer.answer, body.get("model")).encode()
                    trickle_response(self, 200, data, answer.interval_s, outer.stop)
                    return
                if isinstance(answer, Hang):
                    if outer.stop.wait(answer.seconds):
                        return
                    answer = answer.answer
                if isinstance(answer, tuple):
                    status, raw = answer
                else:
                    status, raw = 200, chat_payload(answer, body.get("model"))
                data = raw.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout tests)
                    pass

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def prompt_of(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"]


def aliases_in(prompt: str) -> list[tuple[str, bool]]:
    """(alias, success) of every trajectory block in a labeling prompt."""
    return [(a, s == "True") for a, s in re.findall(r"^### (t\d+) \(success=(True|False)", prompt, re.MULTILINE)]


def capabilities_in(prompt: str) -> list[str]:
    return re.findall(r"^- `([a-z0-9_]+)`:", prompt, re.MULTILINE)
