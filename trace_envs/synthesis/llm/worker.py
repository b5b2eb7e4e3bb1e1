"""The confined worker of an LLM-written env: it hosts the real ``Env`` instances, never the host.

``python -s -P -m trace_envs.synthesis.llm.worker <config.json>`` runs inside the sandbox that
``worker_client.Worker`` launches (``sandbox.py``). It loads the module with ``loader.load_env_class`` (the
same sha256 and static check as in the host, a time limit on the import) and then serves requests until its
stdin closes. It hosts any number of instances of the module's ``Env``, each its own object, named by an
integer id the host assigns (several ``ConfinedEnv`` proxies of one host process share a worker).

Protocol: JSON lines (UTF-8, ASCII-escaped, never pickle), one request on stdin, one reply on stdout:

* first, unasked, the hello: ``{"ok": true, "result": {"capability": str}}``, or an error when the module cannot
  be loaded;
* requests, each naming its instance by ``"id"`` (an int): ``{"op": "new", "id": int, "kwargs": object}`` (builds
  ``Env(**kwargs)`` as that instance; replies ``{"max_steps": int, "max_errors": int, "render_mode": str |
  null}``), ``{"op": "reset", "id": int, "seed": int | null, "options": object | null}``, ``{"op": "step", "id":
  int, "action": str | object}``, ``{"op": "oracle_turns", "id": int}``, ``{"op": "transcript", "id": int}``,
  ``{"op": "render", "id": int}``; any request may carry ``"closed": [int, ...]``, instances the host released,
  which the worker drops first;
* replies ``{"ok": true, "result": ...}`` (reset: ``{"obs", "info"}``; step: ``{"obs", "reward", "terminated",
  "truncated", "info"}``) or ``{"ok": false, "error": {"type": "<exception class>", "message": str}}``: an error
  of the env (or a request naming no instance it hosts) ends that call only; the worker serves the next one.

A reply is at most :data:`MAX_LINE_BYTES`; one that is larger, not JSON or not finite (``NaN``) is sent as an
error instead. The host checks every reply again (it trusts nothing that comes from here). What the module
prints goes to ``/dev/null``; the real stdin and stdout are moved to private descriptors first.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MAX_LINE_BYTES = 16 * 2**20  # a request or a reply, in bytes (the host enforces the same cap)
MAX_ERROR_CHARS = 4000


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=True, allow_nan=False).encode("ascii") + b"\n"


def _error(exc: BaseException) -> dict[str, Any]:
    return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:MAX_ERROR_CHARS]}}


class _Channel:
    """The worker's end of the protocol (private descriptors, bounded lines)."""

    def __init__(self, fd_in: int, fd_out: int):
        self.inp = os.fdopen(fd_in, "rb", buffering=1 << 16)
        self.out = os.fdopen(fd_out, "wb", buffering=0)

    def send(self, doc: dict[str, Any]) -> None:
        try:
            data = _encode(doc)
        except (TypeError, ValueError, RecursionError) as exc:
            data = _encode(_error(ValueError(f"the env's reply is not finite JSON ({type(exc).__name__}: {exc})")))
        if len(data) > MAX_LINE_BYTES:
            data = _encode(_error(ValueError(f"the env's reply is {len(data):,} bytes of JSON, over the "
                                             f"{MAX_LINE_BYTES:,}-byte limit of one message")))
        self.out.write(data)

    def receive(self) -> bytes | None:
        """The next request line (None at end of input); a line over the limit ends the worker (no resync)."""
        line = self.inp.readline(MAX_LINE_BYTES + 1)
        if not line:
            return None
        if not line.endswith(b"\n"):
            raise ValueError(f"a request line over {MAX_LINE_BYTES:,} bytes (or cut short)")
        return line


def _instance_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("a request names its env instance by an integer 'id'")
    return value


def _serve(cls: Any, envs: dict[int, Any], req: dict[str, Any]) -> Any:
    for closed in req.get("closed") or ():  # released by the host: dropped (never called again)
        if isinstance(closed, int):
            envs.pop(closed, None)
    op, iid = req["op"], _instance_id(req.get("id"))
    if op == "new":
        if iid in envs:
            raise ValueError(f"env instance {iid} exists already")
        kwargs = req.get("kwargs")
        if not isinstance(kwargs, dict):
            raise TypeError("the new instance's kwargs are not a JSON object")
        env = cls(**kwargs)
        envs[iid] = env
        return {"max_steps": env.max_steps, "max_errors": env.max_errors, "render_mode": env.render_mode}
    env = envs.get(iid)
    if env is None:
        raise KeyError(f"no env instance {iid} in this worker")
    if op == "reset":
        obs, info = env.reset(seed=req.get("seed"), options=req.get("options"))
        return {"obs": obs, "info": info}
    if op == "step":
        obs, reward, terminated, truncated, info = env.step(req.get("action"))
        return {"obs": obs, "reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
                "info": info}
    if op == "oracle_turns":
        return [str(t) for t in env.oracle_turns()]
    if op == "transcript":
        return env.transcript
    if op == "render":
        return env.render()
    raise ValueError(f"unknown request {op!r}")


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        cfg = json.load(fh)
    try:  # nothing of the host's configuration stays where the module could look for it
        os.unlink(argv[1])
    except OSError:
        pass
    del sys.argv[1:]
    channel = _Channel(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # fd 2 stays the host's error log (the interpreter's own crash messages)
    os.close(null)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the worker
    sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the module's prints
    try:
        from trace_envs.synthesis.llm.validated import load_env_class

        cls = load_env_class(cfg["module_path"], cfg["sha256"])
        hello = {"capability": str(getattr(cls, "capability", ""))}
    except BaseException as exc:  # noqa: BLE001 - every failure of the module is reported, then the worker ends
        channel.send(_error(exc))
        return 1
    channel.send({"ok": True, "result": hello})
    envs: dict[int, Any] = {}  # instance id (assigned by the host) -> its own Env
    while True:
        try:
            line = channel.receive()
        except ValueError as exc:
            channel.send(_error(exc))
            return 1
        if line is None:
            return 0
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise ValueError("a request is a JSON object with a string 'op'")
            result = _serve(cls, envs, req)
        except BaseException as exc:  # noqa: BLE001 - the env's error ends this call only (SystemExit included)
            channel.send(_error(exc))
            continue
        channel.send({"ok": True, "result": result})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
