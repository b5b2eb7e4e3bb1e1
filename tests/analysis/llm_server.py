"""A local OpenAI-compatible chat server for tests (http.server on 127.0.0.1, ephemeral port)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Responder = Callable[[dict[str, Any], int], "str | tuple[int, str]"]


class FakeLLMServer:
    """Serves ``POST /v1/chat/completions``; ``responder(body, n)`` gives the answer text of request n
    (or ``(status, raw_body)`` to fail it). Every request body and header set is recorded."""

    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.paths.append(self.path)
                outer.headers.append(dict(self.headers))
                outer.requests.append(body)
                answer = outer.responder(body, len(outer.requests) - 1)
                if isinstance(answer, tuple):
                    status, raw = answer
                else:
                    status, raw = 200, json.dumps({
                        "id": "x", "object": "chat.completion", "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": answer}}],
                    })
                data = raw.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
        self.httpd.shutdown()
        self.httpd.server_close()


def prompt_of(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"]


def aliases_in(prompt: str) -> list[tuple[str, bool]]:
    """(alias, success) of every trajectory block in a labeling prompt."""
    return [(a, s == "True") for a, s in re.findall(r"^### (t\d+) \(success=(True|False)", prompt, re.MULTILINE)]


def capabilities_in(prompt: str) -> list[str]:
    return re.findall(r"^- `([a-z0-9_]+)`:", prompt, re.MULTILINE)
