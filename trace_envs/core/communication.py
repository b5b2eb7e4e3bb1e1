"""τ²'s COMMUNICATE rule, shared by every env that checks what the agent told the user.

A required string counts as told when some assistant text mentions it (case-insensitive, commas removed), with
two tightenings of τ²'s plain substring test, so that a verifier cannot be passed with a wrong value:

* a number (``"$150"``, ``"897.7"``) is compared by value against the numbers the texts state, with the same
  ``$`` sign: ``"$1509"`` does not tell ``"$150"``, ``"$897.77"`` does not tell ``"$897.7"``, ``"$1141"`` tells
  ``"$1141.0"``;
* any other string must not run on into more digits at an end that is a digit: ``"#W12345678"`` does not tell
  ``"#W1234567"``.

Required dollar amounts are answers, judged as the τ² labeler judges them (:func:`amounts_told`): each must be
stated in some assistant text, and the agent's final answer (the last assistant text that states any dollar
amount) may state no other dollar amount. A text listing candidate totals ("$1 $2 … $1299") or a hedge naming a
wrong amount beside the right one tells nothing, a later text stating another amount takes an earlier answer
back, and a correction stands; answers to several questions may come in several texts. The price: a final
answer that lists the parts beside the total is refused too (parts in an earlier text are not), as is another
amount said after the answer (the scripted experts state the total alone).
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"(\$?)(\d+(?:\.\d+)?)")
_DOLLARS = re.compile(r"\$\s?(\d+(?:\.\d+)?)")
_BARE = re.compile(r"(?<![\d.$])(\d+(?:\.\d+)?)(?!\d)")
CENT = 0.005


def assistant_texts(transcript: list[dict[str, Any]]) -> list[str]:
    """The non-empty assistant texts of a transcript, in order."""
    texts = (m.get("content") or "" for m in transcript if m.get("role") == "assistant")
    return [t for t in texts if t.strip()]


def dollar_amounts(text: str) -> list[float]:
    """The dollar amounts ``text`` states (``$1,141.50`` reads 1141.5), in order."""
    return [float(a) for a in _DOLLARS.findall(text.replace(",", ""))]


def _normal(text: str) -> str:
    return text.lower().replace(",", "")


def mentions(text: str, required: str) -> bool:
    """Whether ``text`` tells ``required`` (see the module docstring)."""
    text, required = _normal(text), _normal(required).strip()
    number = _NUMBER.fullmatch(required)
    if number is not None:
        value = float(number.group(2))
        found = dollar_amounts(text) if number.group(1) else [float(v) for v in _BARE.findall(text)]
        return any(abs(v - value) < CENT for v in found)
    start = text.find(required)
    while start >= 0:
        end = start + len(required)
        runs_on = required[-1:].isdigit() and text[end:end + 1].isdigit()
        runs_in = required[:1].isdigit() and start > 0 and text[start - 1].isdigit()
        if not (runs_on or runs_in):
            return True
        start = text.find(required, start + 1)
    return False


def required_dollars(required: str) -> float | None:
    """The value of a required dollar amount (``"$1,141.0"`` reads 1141.0), else ``None``."""
    number = _NUMBER.fullmatch(_normal(required).strip())
    return float(number.group(2)) if number is not None and number.group(1) else None


def answer_amounts(texts: list[str]) -> list[float]:
    """The dollar amounts of the agent's answer: those of the last text stating any (none: ``[]``)."""
    for text in reversed(texts):
        amounts = dollar_amounts(text)
        if amounts:
            return amounts
    return []


def amounts_told(texts: list[str], required: list[float]) -> bool:
    """Whether the assistant ``texts`` state every ``required`` dollar amount and their answer
    (:func:`answer_amounts`) states no other: the one rule the verifiers and the τ² labeler judge an amount by."""
    stated = [a for text in texts for a in dollar_amounts(text)]

    def among(value: float, values: list[float]) -> bool:
        return any(abs(value - v) < CENT for v in values)
    return all(among(v, stated) for v in required) and all(among(a, required) for a in answer_amounts(texts))


def communicated(transcript: list[dict[str, Any]], required: list[str]) -> bool:
    """Every string of ``required`` is told: dollar amounts in the final answer (:func:`amounts_told`), any
    other string in some assistant text of ``transcript``."""
    texts = assistant_texts(transcript)
    dollars = [required_dollars(s) for s in required]
    if any(v is not None for v in dollars) and not amounts_told(texts, [v for v in dollars if v is not None]):
        return False
    return all(any(mentions(t, s) for t in texts) for s, v in zip(required, dollars) if v is None)
