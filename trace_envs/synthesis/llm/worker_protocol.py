"""The host's check of what an LLM env worker (``worker.py``) says: every reply is parsed and shape-checked here.

A reply that is not JSON (``NaN`` / ``Infinity`` included), not of the shape its request asks for, an observation
outside ``MessageList`` or a reward that is not a finite number raises :class:`Malformed` (the caller kills the
worker: see ``worker_client.Worker``). An error the env raised in the worker comes back as an :class:`EnvError`
holding the same built-in exception class (any other class as ``RuntimeError``), marked with the module's path.
"""

from __future__ import annotations

import json
import math
from typing import Any

from trace_envs.core.spaces import MessageList

RAISED_AS = {cls.__name__: cls for cls in (
    ValueError, TypeError, KeyError, IndexError, LookupError, RuntimeError, TimeoutError, ZeroDivisionError,
    ArithmeticError, OverflowError, AttributeError, NotImplementedError, AssertionError, RecursionError, MemoryError,
    UnicodeError, StopIteration)}
RAISED_AS["StopIteration"] = RuntimeError  # never leak StopIteration into a caller's loop


class WorkerError(RuntimeError):
    """The confined worker exited, crashed, broke a limit or sent a malformed reply (it was killed)."""


class Malformed(Exception):
    """A reply that breaks the protocol (the worker is killed)."""


class EnvError:
    """An exception the env raised in the worker (the worker goes on), as a reply."""

    def __init__(self, exc: Exception):
        self.exc = exc


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_line(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise Malformed(f"not JSON: {exc}") from None


_MESSAGES = MessageList()


def _messages(value: Any, what: str) -> list[dict[str, Any]]:
    if not _MESSAGES.contains(value):
        raise Malformed(f"{what} is not a list of chat messages")
    return value


def _info(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not a JSON object")
    return value


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Malformed(f"{what} is not a positive integer")
    return value


def check_result(op: str, result: Any) -> Any:
    """``result`` of request ``op`` when it has the shape the protocol says; :class:`Malformed` otherwise."""
    if op == "hello":
        _info(result, "the hello")
        if not isinstance(result.get("capability"), str):
            raise Malformed("the hello's capability is not a string")
        return {"capability": result["capability"]}
    if op == "new":
        _info(result, "the new instance's reply")
        render_mode = result.get("render_mode")
        if render_mode is not None and not isinstance(render_mode, str):
            raise Malformed("the new instance's render_mode is not a string")
        return {"max_steps": _whole(result.get("max_steps"), "max_steps"),
                "max_errors": _whole(result.get("max_errors"), "max_errors"), "render_mode": render_mode}
    if op == "reset":
        _info(result, "the reset reply")
        return _messages(result.get("obs"), "the observation"), _info(result.get("info"), "the info")
    if op == "step":
        _info(result, "the step reply")
        reward = result.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise Malformed(f"the reward {reward!r} is not a finite number")
        if not isinstance(result.get("terminated"), bool) or not isinstance(result.get("truncated"), bool):
            raise Malformed("terminated / truncated are not booleans")
        return (_messages(result.get("obs"), "the observation"), float(reward), result["terminated"],
                result["truncated"], _info(result.get("info"), "the info"))
    if op == "oracle_turns":
        if not isinstance(result, list) or not all(isinstance(t, str) for t in result):
            raise Malformed("the oracle's turns are not a list of strings")
        return result
    if op == "transcript":
        if not isinstance(result, list) or not all(isinstance(m, dict) for m in result):
            raise Malformed("the transcript is not a list of messages")
        return result
    if op == "render":
        if result is not None and not isinstance(result, str):
            raise Malformed("the rendering is not a string")
        return result
    raise Malformed(f"a reply to an unknown request {op!r}")  # pragma: no cover - the proxy's own ops only


def parse_reply(line: bytes, op: str, label: str) -> Any:
    """The checked result of one reply line to ``op``, or an :class:`EnvError` for an error the env raised;
    :class:`Malformed` when the line breaks the protocol. ``label`` (the module's path) marks the env's errors."""
    doc = _json_line(line)
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        raise Malformed("not a reply object")
    if doc["ok"]:
        if "result" not in doc:
            raise Malformed("a reply without a result")
        return check_result(op, doc["result"])
    err = doc.get("error")
    if not isinstance(err, dict) or not isinstance(err.get("type"), str) or not isinstance(err.get("message"), str):
        raise Malformed("an error reply without a type and a message")
    cls = RAISED_AS.get(err["type"], RuntimeError)
    prefix = "" if cls.__name__ == err["type"] else f"{err['type'][:100]}: "
    return EnvError(cls(f"{prefix}{err['message'][:4000]} [{label}, in its confined worker]"))
