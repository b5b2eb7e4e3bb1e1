"""``trace_envs.http_deadline.ConnectionPool``: keep-alive reuse, a server-closed connection replaced,
the total deadline kept on a reused connection, and the shared JSON client going through it."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trace_envs.http_deadline import ConnectionPool, DeadlineExceeded
from trace_envs.llm_http import JSONHTTPClient


class _Server:
    def __init__(self, close_after: int | None = None, trickle_after: int | None = None) -> None:
        self.connections, self.requests = set(), 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.connections.add(self.client_address)
                outer.requests += 1
                payload = json.dumps({"echo": body, "n": outer.requests}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if close_after is not None and outer.requests % close_after == 0:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if trickle_after is not None and outer.requests > trickle_after:
                    for byte in payload:  # one byte every 0.1 s: only a total deadline stops this
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.1)
                else:
                    self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1/chat"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    servers = []

    def make(**kw):
        servers.append(_Server(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _post(pool, url, i, timeout=5.0):
    resp = pool.request("POST", url, json.dumps({"i": i}).encode(), {"Content-Type": "application/json"}, timeout)
    assert resp.status == 200
    return json.loads(resp.body)


def test_requests_to_one_server_share_one_connection(server_factory):
    server, pool = server_factory(), ConnectionPool()
    answers = [_post(pool, server.url, i) for i in range(5)]
    assert [a["echo"]["i"] for a in answers] == list(range(5))
    assert pool.connections_opened == 1 and len(server.connections) == 1


def test_a_connection_the_server_closes_is_replaced(server_factory):
    server, pool = server_factory(close_after=2), ConnectionPool()
    answers = [_post(pool, server.url, i) for i in range(6)]
    assert [a["n"] for a in answers] == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing sent twice
    assert pool.connections_opened == 3


def test_a_reused_connection_keeps_the_total_deadline(server_factory):
    server, pool = server_factory(trickle_after=1), ConnectionPool()
    _post(pool, server.url, 0)
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="1 s deadline"):
        _post(pool, server.url, 1, timeout=1.0)
    assert time.monotonic() - start < 2.5
    assert pool.connections_opened == 1  # the timed-out request ran on the kept connection


def test_the_shared_json_client_keeps_its_connection_alive(server_factory):
    server = server_factory()
    client = JSONHTTPClient(timeout=5.0, retries=0)
    for i in range(4):
        assert client.post(server.url, {"i": i})["echo"] == {"i": i}
    assert client.requests_made == 4 and len(server.connections) == 1
