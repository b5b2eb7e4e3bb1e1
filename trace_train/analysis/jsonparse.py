"""Tolerant JSON extraction from LLM answers: code fences, prose around the object, trailing
commas, and answers cut off mid-list (the longest complete prefix is kept)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)(?:```|$)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def _outside_strings(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """``(index, character)`` of each character of ``text`` from ``start`` that lies outside a JSON string literal
    (the quotes themselves are not given)."""
    in_str = esc = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        else:
            yield i, ch


_SPACE_THEN_CLOSE = re.compile(r"\s*[}\]]")


def _strip_trailing_commas(text: str) -> str:
    """Remove commas directly before a closing bracket, outside strings."""
    drop = {i for i, ch in _outside_strings(text) if ch == "," and _SPACE_THEN_CLOSE.match(text, i + 1)}
    return "".join(ch for i, ch in enumerate(text) if i not in drop)


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


def _matching_end(text: str, start: int) -> int:
    """The index after the bracket that closes the one at ``start`` (outside strings); ``len(text)`` if none does."""
    depth = 0
    for i, ch in _outside_strings(text, start):
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


MAX_LATER_STARTS = 200  # brackets tried after a segment's first one (each a strict, C-speed parse)


def _strict_value_at(body: str) -> Any:
    """The complete JSON value ``body`` starts with, followed by anything; ``ValueError`` when there is none."""
    try:
        return json.JSONDecoder().raw_decode(body)[0]
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None


def _value_at(body: str) -> Any:
    """The JSON value that ``body`` starts with: as is, without trailing commas, followed by other text, or the
    longest complete prefix of a truncated one; ``ValueError`` when there is none."""
    for attempt in (body.strip(), _strip_trailing_commas(body.strip())):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            pass
    try:  # extra text after a complete value
        value, _ = json.JSONDecoder().raw_decode(_strip_trailing_commas(body))
        return value
    except json.JSONDecodeError:
        pass
    return _close_truncated(body)


def json_candidates(text: str) -> Iterator[Any]:
    """Every JSON value of an LLM answer, in order: those of each code fence, then those of the whole text. Each
    ``{`` / ``[`` that starts a parsable value gives one (the values nested inside it are not given again); one
    that starts none is skipped. The first one is :func:`parse_json_loose`'s answer; a reader that finds no use
    for it (a quoted tool call, a repeated format example) takes the next."""
    if not isinstance(text, str):
        raise TypeError(f"answer must be text, got {type(text).__name__}")
    for segment in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        pos, tried = 0, 0
        while tried <= MAX_LATER_STARTS:
            starts = [i for i in (segment.find("{", pos), segment.find("[", pos)) if i >= 0]
            if not starts:
                break
            start = min(starts)
            # the lenient repairs (trailing commas, a truncated value) only at the segment's first bracket, as before:
            # at every bracket they would re-scan the rest of the text (an answer of many open braces: cubic)
            try:
                value = (_value_at if tried == 0 else _strict_value_at)(segment[start:])
            except ValueError:
                pos, tried = start + 1, tried + 1
                continue
            tried += 1
            yield value
            pos = _matching_end(segment, start)


def parse_json_loose(text: str) -> Any:
    """Best-effort parse of the first JSON value in an LLM answer (:func:`json_candidates`); raises ValueError when
    there is none."""
    for value in json_candidates(text):
        return value
    raise ValueError("no JSON found in the answer")
