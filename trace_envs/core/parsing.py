"""The one tool-call parser: assistant output (raw text or a message dict) -> ``ParsedTurn``.

Accepted forms, in order:
* Qwen/Hermes: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (any number; an unclosed
  final tag runs to the end of the text; a ``</tool_call>`` inside a JSON string, as in code an agent
  writes, does not end the block);
* a bare JSON object with ``name`` and ``arguments`` as the whole message;
* an OpenAI assistant message dict (``content`` + ``tool_calls`` with ``function.arguments`` as a JSON
  string or an object), or a ``{"name", "arguments"}`` dict.

Parsing never raises on bad model output: problems are collected in ``ParsedTurn.errors`` and the env
turns them into observations. Every JSON decode goes through ``_loads`` (decode errors, nesting deeper
than ``MAX_JSON_DEPTH``, integer literals too long for Python's int conversion all become errors) and
every decoded or dict-supplied value through ``_clean`` (depth, JSON types, integer size), and lone
UTF-16 surrogates are replaced with U+FFFD (reported as an error) so that the transcript is always
writable as UTF-8.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
MAX_JSON_DEPTH = 32  # containers, the call object included; real tool calls nest 2-5 levels
MAX_INT_BITS = 13_000  # ~3,900 decimal digits: under Python's default int<->str limit (4,300)
NAME_ECHO_CHARS = 80  # an agent-chosen name (tool, argument) is echoed back at most this long; a longer call id is
# dropped (the env assigns ``call_<n>``), so no agent-chosen string outgrows an observation's shared-memory slot
_COMPACT = (",", ":")  # the chat template renders tool calls compactly; emit the same bytes
_CLOSE_TRIES = 8  # close tags tried per block before the first one is taken (bounds the work on hostile text)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SPECIAL = re.compile(r'["\\\[\]{}]')
_DEPTH_ERROR = f"nests deeper than {MAX_JSON_DEPTH} levels"
_BIG_INT_ERROR = "has an integer literal with too many digits (the limit is about 3,900)"


class _BadJSON(Exception):
    """A decoded or supplied value that cannot be a tool call; the message reaches the agent."""


def scrub_surrogates(text: str) -> tuple[str, int]:
    """``text`` with lone UTF-16 surrogates replaced by U+FFFD (valid pairs are joined), and how many."""
    if not _SURROGATE.search(text):
        return text, 0
    clean = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return clean, len(_SURROGATE.findall(text)) - 2 * (len(text) - len(clean))


def _too_deep(text: str, limit: int) -> bool:
    """True if JSON text nests brackets deeper than ``limit`` (string literals ignored).

    A linear scan over the special characters only, so hostile input cannot make it slow or recurse.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, -1
    for match in _SPECIAL.finditer(text):
        pos, char = match.start(), match.group()
        if pos == escaped:
            continue
        if in_string:
            if char == "\\":
                escaped = pos + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


class _Cleaner:
    """Checks a JSON-like value (depth, types, int size) and scrubs surrogates from its strings."""

    def __init__(self) -> None:
        self.surrogates = 0

    def __call__(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, str):
            clean, n = scrub_surrogates(value)
            self.surrogates += n
            return clean
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return value
        if isinstance(value, int):
            if value.bit_length() > MAX_INT_BITS:
                raise _BadJSON(_BIG_INT_ERROR)
            return value
        if isinstance(value, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                raise _BadJSON(_DEPTH_ERROR)
            if isinstance(value, list):
                return [self(v, depth + 1) for v in value]
            out = {}
            for key, v in value.items():
                if not isinstance(key, str):
                    raise _BadJSON(f"has a non-string object key of type {type(key).__name__}")
                out[self(key)] = self(v, depth + 1)
            return out
        raise _BadJSON(f"has a value of type {type(value).__name__}, which is not JSON")


def _loads(text: str, cleaner: _Cleaner, depth: int = 0) -> Any:
    """``json.loads`` for model output: every failure is a ``_BadJSON`` with a message for the agent.
    ``depth``: the nesting level the decoded value sits at (1 for a call's ``arguments`` string)."""
    if _too_deep(text, MAX_JSON_DEPTH - depth):
        raise _BadJSON(_DEPTH_ERROR)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadJSON(f"is not valid JSON ({exc.msg} at char {exc.pos})") from None
    except RecursionError:
        raise _BadJSON(_DEPTH_ERROR) from None
    except ValueError as exc:  # int max str digits, and anything else the decoder rejects
        if "integer string conversion" in str(exc):
            raise _BadJSON(_BIG_INT_ERROR) from None
        raise _BadJSON(f"is not valid JSON ({str(exc)[:200]})") from None
    return cleaner(value, depth)


def _surrogate_error(n: int) -> str:
    return (f"the message contained {n} invalid Unicode character(s) (lone UTF-16 surrogates); "
            "each was replaced with U+FFFD")


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


def _call_from_obj(obj: Any, cleaner: _Cleaner) -> tuple[ToolCall | None, str | None]:
    """A ``ToolCall`` from a decoded (already cleaned) object; ``arguments`` strings are decoded here."""
    if not isinstance(obj, dict):
        return None, f"a tool call must be a JSON object, got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_calls entry
        raw_id = obj.get("id")
        call_id = raw_id if isinstance(raw_id, str) else "" if raw_id is None else json.dumps(raw_id)
        if len(call_id) > NAME_ECHO_CHARS:  # echoed in the tool message: a longer one is dropped, the env numbers it
            call_id = ""
        obj = obj["function"]
    else:
        call_id = ""
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "a tool call needs a string 'name'"
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = _loads(args, cleaner, depth=1) if args.strip() else {}
        except _BadJSON as exc:
            return None, f"the arguments string of {quoted_name(name)} {exc}"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"arguments of {quoted_name(name)} must be a JSON object"
    return ToolCall(name=name.strip(), arguments=args, id=call_id), None


def short_name(name: str, limit: int = NAME_ECHO_CHARS) -> str:
    """``name`` cut to ``limit`` characters (``...`` marks a cut): an agent-chosen name as the env echoes it."""
    return name if len(name) <= limit else name[:limit] + "..."


def quoted_name(name: str) -> str:
    """``repr`` of :func:`short_name`: how error messages quote an agent-chosen name."""
    return repr(short_name(name))


def _add_call(turn: ParsedTurn, obj: Any, cleaner: _Cleaner) -> None:
    call, err = _call_from_obj(obj, cleaner)
    if err:
        turn.errors.append(err)
    else:
        turn.tool_calls.append(call)


def _report_surrogates(turn: ParsedTurn, n: int) -> ParsedTurn:
    if n:
        turn.errors.insert(0, _surrogate_error(n))
    return turn


def parse_assistant_text(text: str) -> ParsedTurn:
    """Parse raw assistant text (see module docstring)."""
    if not isinstance(text, str):
        return ParsedTurn(content="", errors=[f"the action must be text, got {type(text).__name__}"])
    text, n_bad = scrub_surrogates(text)
    cleaner = _Cleaner()
    turn = _parse_text(text, cleaner)
    return _report_surrogates(turn, n_bad + cleaner.surrogates)


def _blocks(text: str, cleaner: _Cleaner) -> tuple[list[Any], str]:
    """The ``<tool_call>`` blocks of ``text`` as decoded objects (a ``_BadJSON`` for a broken one) and the text
    outside them. A block ends at the first ``</tool_call>`` after which its body is valid JSON (of the first
    ``_CLOSE_TRIES``), else at the first one, else at the end of the text."""
    found: list[Any] = []
    outside: list[str] = []
    pos = 0
    while (start := text.find(TOOL_CALL_OPEN, pos)) != -1:
        outside.append(text[pos:start])
        body_start = start + len(TOOL_CALL_OPEN)
        closes = []
        at = text.find(TOOL_CALL_CLOSE, body_start)
        while at != -1 and len(closes) < _CLOSE_TRIES:
            closes.append(at)
            at = text.find(TOOL_CALL_CLOSE, at + len(TOOL_CALL_CLOSE))
        first: Any = None
        for i, end in enumerate(closes or [len(text)]):
            trial = _Cleaner()  # a candidate's scrubbed surrogates count only if it is the one taken
            try:
                obj: Any = _loads(text[body_start:end].strip(), trial)
            except _BadJSON as exc:
                obj = exc
            if i == 0 or not isinstance(obj, _BadJSON):
                first, block_end, surrogates = obj, end, trial.surrogates
            if not isinstance(obj, _BadJSON):
                break
        cleaner.surrogates += surrogates
        found.append(first)
        pos = block_end + len(TOOL_CALL_CLOSE) if closes else len(text)
    outside.append(text[pos:])
    return found, "".join(outside).replace(TOOL_CALL_CLOSE, "")


def _parse_text(text: str, cleaner: _Cleaner) -> ParsedTurn:
    turn = ParsedTurn(content="", raw=text)
    if TOOL_CALL_OPEN in text:
        objects, outside = _blocks(text, cleaner)
        for obj in objects:
            if isinstance(obj, _BadJSON):
                turn.errors.append(f"the tool call JSON {obj}")
            else:
                _add_call(turn, obj, cleaner)
        turn.content = outside.strip()
        return turn
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            obj = _loads(stripped, cleaner)
        except _BadJSON as exc:
            # Plain text that merely looks like JSON stays text; a broken call is reported.
            if '"name"' in stripped and '"arguments"' in stripped:
                turn.errors.append(f"the tool call JSON {exc}")
                return turn
            obj = None
        if isinstance(obj, dict) and "name" in obj and "arguments" in obj:
            _add_call(turn, obj, cleaner)
            return turn
    turn.content = stripped
    return turn


def parse_action(action: Any) -> ParsedTurn:
    """Parse an env action: raw text, an OpenAI assistant message dict, or a ``{name, arguments}`` dict."""
    if isinstance(action, str):
        return parse_assistant_text(action)
    if isinstance(action, dict):
        cleaner = _Cleaner()
        try:
            action = cleaner(action)
        except _BadJSON as exc:
            return ParsedTurn(content="", errors=[f"the action {exc}"], raw=type(action).__name__)
        return _report_surrogates(_parse_dict(action, cleaner), cleaner.surrogates)
    return ParsedTurn(content="", errors=[f"unsupported action type {type(action).__name__}"],
                      raw=type(action).__name__)


def _parse_dict(action: dict[str, Any], cleaner: _Cleaner) -> ParsedTurn:
    if "tool_calls" in action or action.get("role") == "assistant":
        content = action.get("content") or ""
        if not isinstance(content, str):
            return ParsedTurn(content="", errors=["message content must be a string"], raw=json.dumps(action))
        # Text content may itself carry <tool_call> blocks.
        turn = _parse_text(content, cleaner) if TOOL_CALL_OPEN in content else ParsedTurn(content.strip())
        entries = action.get("tool_calls") or []
        if not isinstance(entries, list):
            turn.errors.append("tool_calls must be a list")
            entries = []
        for entry in entries:
            _add_call(turn, entry, cleaner)
        turn.raw = json.dumps(action, ensure_ascii=False)
        return turn
    if "name" in action:
        turn = ParsedTurn(content="", raw=json.dumps(action, ensure_ascii=False))
        _add_call(turn, action, cleaner)
        return turn
    return ParsedTurn(content="", errors=["unsupported action: a dict needs 'tool_calls', 'role' or 'name'"],
                      raw=json.dumps(action, ensure_ascii=False))


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
