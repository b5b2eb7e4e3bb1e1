"""Small readers over OpenAI-format chat messages, shared by the programmatic probes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

WRITE_PREFIXES = ("cancel", "modify", "return", "exchange", "update", "book", "create", "delete", "send")


@dataclass(frozen=True)
class ToolCall:
    index: int  # position of the assistant message in the message list
    name: str
    arguments: dict[str, Any]
    result: str | None  # content of the matching tool message, when there is one


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return {"__unparsed__": raw}
        return value if isinstance(value, dict) else {"__value__": value}
    return {}


def tool_calls(messages: list[dict[str, Any]]) -> list[ToolCall]:
    """Every tool call the assistant made, in order, with the tool result that answered it."""
    results: dict[str, str] = {}
    for msg in messages:
        if msg.get("role") == "tool" and msg.get("tool_call_id"):
            results[str(msg["tool_call_id"])] = str(msg.get("content") or "")
    calls: list[ToolCall] = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        pending = msg.get("tool_calls") or []
        for j, call in enumerate(pending):
            fn = call.get("function", call)
            result = results.get(str(call.get("id"))) if call.get("id") is not None else None
            if result is None:  # fall back to positional matching of the tool messages that follow
                after = [m for m in messages[i + 1:] if m.get("role") == "tool"]
                if j < len(after) and not after[j].get("tool_call_id"):
                    result = str(after[j].get("content") or "")
            calls.append(ToolCall(i, str(fn.get("name", "")), _args(fn.get("arguments")), result))
    return calls


def is_write_tool(name: str) -> bool:
    return name.lower().startswith(WRITE_PREFIXES)


def is_error_result(content: str | None) -> bool:
    """Whether a tool result reports an error (``Error: …`` text or a JSON object with ``error``)."""
    if not content:
        return False
    text = content.strip()
    if text.lower().startswith("error"):
        return True
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return False
        return isinstance(value, dict) and bool(value.get("error"))
    return False


def assistant_texts(messages: list[dict[str, Any]]) -> Iterator[tuple[int, str]]:
    """(index, text) of every assistant message with text content."""
    for i, msg in enumerate(messages):
        if msg.get("role") == "assistant" and isinstance(msg.get("content"), str) and msg["content"].strip():
            yield i, msg["content"]
