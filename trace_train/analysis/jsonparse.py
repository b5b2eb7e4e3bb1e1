"""Tolerant JSON extraction from LLM answers: code fences, prose around the object, trailing
commas, and answers cut off mid-list (the longest complete prefix is kept)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)(?:```|$)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def _strip_trailing_commas(text: str) -> str:
    """Remove commas directly before a closing bracket, outside strings."""
    out, in_str, esc = [], False, False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_str:
            out.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif ch == ",":
            j = i + 1
            while j < len(text) and text[j].isspace():
                j += 1
            if j < len(text) and text[j] in "}]":
                i += 1
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _close_truncated(text: str) -> Any:
    """Parse the longest prefix of a truncated document that can be closed into valid JSON."""
    stack: list[str] = []
    in_str = esc = False
    cuts: list[tuple[int, tuple[str, ...]]] = []  # (end index, open brackets) after a complete value
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack:
                break
            stack.pop()
            cuts.append((i + 1, tuple(stack)))
            if not stack:
                break
        elif ch == ",":
            cuts.append((i, tuple(stack)))
    for end, opened in reversed(cuts[-400:]):
        closers = "".join("}" if b == "{" else "]" for b in reversed(opened))
        try:
            return json.loads(_strip_trailing_commas(text[:end] + closers))
        except json.JSONDecodeError:
            continue
    raise ValueError("no parsable JSON prefix")


def parse_json_loose(text: str) -> Any:
    """Best-effort parse of the JSON value in an LLM answer; raises ValueError when there is none."""
    if not isinstance(text, str):
        raise TypeError(f"answer must be text, got {type(text).__name__}")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for cand in candidates:
        starts = [i for i in (cand.find("{"), cand.find("[")) if i >= 0]
        if not starts:
            continue
        body = cand[min(starts):].strip()
        for attempt in (body, _strip_trailing_commas(body)):
            try:
                return json.loads(attempt)
            except json.JSONDecodeError:
                pass
        try:  # extra text after a complete value
            value, _ = json.JSONDecoder().raw_decode(_strip_trailing_commas(body))
            return value
        except json.JSONDecodeError:
            pass
        try:
            return _close_truncated(body)
        except ValueError:
            continue
    raise ValueError("no JSON found in the answer")
