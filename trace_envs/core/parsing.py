"""The one tool-call parser: assistant output (raw text or a message dict) -> ``ParsedTurn``.

Accepted forms, in order:
* Qwen/Hermes: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (any number; an unclosed
  final tag runs to the end of the text);
* a bare JSON object with ``name`` and ``arguments`` as the whole message;
* an OpenAI assistant message dict (``content`` + ``tool_calls`` with ``function.arguments`` as a JSON
  string or an object), or a ``{"name", "arguments"}`` dict.

Parsing never raises on bad model output: problems are collected in ``ParsedTurn.errors`` and the env
turns them into observations.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_COMPACT = (",", ":")  # the chat template renders tool calls compactly; emit the same bytes
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass
class ParsedTurn:
    """An assistant turn split into user-facing text, well-formed tool calls and parse errors."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    raw: str = ""

    @property
    def format_ok(self) -> bool:
        return not self.errors


def _call_from_obj(obj: Any) -> tuple[ToolCall | None, str | None]:
    if not isinstance(obj, dict):
        return None, f"a tool call must be a JSON object, got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_calls entry
        call_id = str(obj.get("id", ""))
        obj = obj["function"]
    else:
        call_id = ""
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "a tool call needs a string 'name'"
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"arguments of {name!r} are not valid JSON ({exc.msg})"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"arguments of {name!r} must be a JSON object"
    return ToolCall(name=name.strip(), arguments=args, id=call_id), None


def parse_assistant_text(text: str) -> ParsedTurn:
    """Parse raw assistant text (see module docstring)."""
    if not isinstance(text, str):
        return ParsedTurn(content="", errors=[f"the action must be text, got {type(text).__name__}"])
    turn = ParsedTurn(content="", raw=text)
    if TOOL_CALL_OPEN in text:
        for body in _BLOCK.findall(text):
            try:
                obj = json.loads(body.strip())
            except json.JSONDecodeError as exc:
                turn.errors.append(f"malformed tool call JSON ({exc.msg} at char {exc.pos})")
                continue
            call, err = _call_from_obj(obj)
            if err:
                turn.errors.append(err)
            else:
                turn.tool_calls.append(call)
        turn.content = _BLOCK.sub("", text).replace(TOOL_CALL_CLOSE, "").strip()
        return turn
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "name" in obj and "arguments" in obj:
            call, err = _call_from_obj(obj)
            if err:
                turn.errors.append(err)
            else:
                turn.tool_calls.append(call)
            return turn
    turn.content = stripped
    return turn


def parse_action(action: Any) -> ParsedTurn:
    """Parse an env action: raw text, an OpenAI assistant message dict, or a ``{name, arguments}`` dict."""
    if isinstance(action, str):
        return parse_assistant_text(action)
    if isinstance(action, dict):
        if "tool_calls" in action or action.get("role") == "assistant":
            content = action.get("content") or ""
            if not isinstance(content, str):
                return ParsedTurn(content="", errors=["message content must be a string"], raw=str(action))
            # Text content may itself carry <tool_call> blocks.
            turn = parse_assistant_text(content) if TOOL_CALL_OPEN in content else ParsedTurn(content.strip())
            entries = action.get("tool_calls") or []
            if not isinstance(entries, list):
                turn.errors.append("tool_calls must be a list")
                entries = []
            for entry in entries:
                call, err = _call_from_obj(entry)
                if err:
                    turn.errors.append(err)
                else:
                    turn.tool_calls.append(call)
            turn.raw = json.dumps(action, default=str)
            return turn
        if "name" in action:
            call, err = _call_from_obj(action)
            return ParsedTurn(content="", tool_calls=[call] if call else [], errors=[err] if err else [])
    return ParsedTurn(content="", errors=[f"unsupported action type {type(action).__name__}"], raw=repr(action))


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render one tool call in the Qwen/Hermes text form (what scripted policies emit)."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False, separators=_COMPACT)
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def assistant_message(turn: ParsedTurn) -> dict[str, Any]:
    """The OpenAI-format assistant message for a parsed turn (arguments as JSON strings)."""
    msg: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.tool_calls:
        msg["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False, separators=_COMPACT),
                },
            }
            for call in turn.tool_calls
        ]
    return msg
