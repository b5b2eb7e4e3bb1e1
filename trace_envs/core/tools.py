"""Tools in OpenAI function format, argument validation, and error-tolerant dispatch."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trace_envs.core.parsing import quoted_name, short_name

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class ToolError(Exception):
    """Raised by a tool implementation; the message reaches the agent as ``Error: <message>``.

    Any other exception from a tool is a bug in the tool and propagates (the episode ends as ``env_error``),
    except Python's limits on huge numbers (see ``ToolBox.call``)."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool: name, description, JSON-schema parameters, implementation, whether it writes state."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    mutates: bool = False

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def params(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build a JSON-schema object from ``{name: schema}`` maps (helper for tool declarations)."""
    props = {**required, **(optional or {})}
    return {"type": "object", "properties": props, "required": list(required)}


STR = {"type": "string"}
STR_LIST = {"type": "array", "items": {"type": "string"}}


def validate_arguments(spec: ToolSpec, args: dict[str, Any]) -> str | None:
    """Return an error message if ``args`` do not fit ``spec``'s schema, else None."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    missing = [name for name in spec.parameters.get("required", []) if name not in args]
    if missing:
        return f"missing required argument(s) {', '.join(missing)} for {spec.name}"
    unknown = [name for name in args if name not in props]
    if unknown:
        return f"unknown argument(s) {', '.join(map(short_name, unknown))} for {spec.name}"
    for name, value in args.items():
        expected = props[name].get("type")
        if expected is None:
            continue
        types = _JSON_TYPES.get(expected, (object,))
        if isinstance(value, bool) and expected in ("integer", "number"):
            return f"argument {name} of {spec.name} must be {expected}"
        if not isinstance(value, types):
            return f"argument {name} of {spec.name} must be {expected}, got {type(value).__name__}"
        item_type = props[name].get("items", {}).get("type") if expected == "array" else None
        if item_type and not all(isinstance(v, _JSON_TYPES.get(item_type, (object,))) for v in value):
            return f"argument {name} of {spec.name} must be a list of {item_type}"
    return None


@dataclass
class ToolResult:
    output: str
    error: bool
    mutated: bool = False


@dataclass
class ToolBox:
    """The tools of one env instance."""

    tools: dict[str, ToolSpec] = field(default_factory=dict)

    @classmethod
    def of(cls, specs: list[ToolSpec]) -> ToolBox:
        return cls({spec.name: spec for spec in specs})

    def schemas(self) -> list[dict[str, Any]]:
        return [spec.schema() for spec in self.tools.values()]

    def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Run a tool; unknown tools, bad arguments, ``ToolError`` and numbers too large for Python (an
        ``OverflowError``, or a result over the int-to-text digit limit) become error results."""
        spec = self.tools.get(name)
        if spec is None:
            return ToolResult(f"Error: unknown tool {quoted_name(name)}; available: {', '.join(self.tools)}",
                              error=True)
        problem = validate_arguments(spec, args)
        if problem:
            return ToolResult(f"Error: {problem}", error=True)
        try:
            out = spec.fn(**args)
            text = out if isinstance(out, str) else json.dumps(out, separators=(",", ":"), ensure_ascii=False)
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", error=True)
        except (OverflowError, ValueError) as exc:
            # The parser admits integers of up to ~3,900 digits, so an agent can hand a tool numbers that Python
            # cannot turn into floats or (once multiplied) into text; any other exception is the tool's own bug.
            why = _number_too_large(exc)
            if why is None:
                raise
            return ToolResult(f"Error: {spec.name}: a number is too large ({why})", error=True)
        return ToolResult(text, error=False, mutated=spec.mutates)


def _number_too_large(exc: Exception) -> str | None:
    """What Python refused, if ``exc`` is one of its limits on huge numbers, else None."""
    if isinstance(exc, OverflowError):
        return str(exc)
    if "integer string conversion" in str(exc):
        return f"it has more than {sys.get_int_max_str_digits()} digits"
    return None
