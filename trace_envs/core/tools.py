"""Tools in OpenAI function format, argument validation, and error-tolerant dispatch."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class ToolError(Exception):
    """Raised by a tool implementation; the message reaches the agent as ``Error: <message>``."""


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
        return f"unknown argument(s) {', '.join(unknown)} for {spec.name}"
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
        """Run a tool; unknown tools, bad arguments and ``ToolError`` become error results."""
        spec = self.tools.get(name)
        if spec is None:
            return ToolResult(f"Error: unknown tool {name!r}; available: {', '.join(self.tools)}", error=True)
        problem = validate_arguments(spec, args)
        if problem:
            return ToolResult(f"Error: {problem}", error=True)
        try:
            out = spec.fn(**args)
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", error=True)
        text = out if isinstance(out, str) else json.dumps(out, separators=(",", ":"), ensure_ascii=False)
        return ToolResult(text, error=False, mutated=spec.mutates)
