"""τ²'s COMMUNICATE rule, shared by every env that checks what the agent told the user.

A required string counts as told when some assistant text mentions it (case-insensitive, commas removed), with
two tightenings of τ²'s plain substring test, so that a verifier cannot be passed with a wrong value:

* a number (``"$150"``, ``"897.7"``) is compared by value against the numbers the texts state, with the same
  ``$`` sign: ``"$1509"`` does not tell ``"$150"``, ``"$897.77"`` does not tell ``"$897.7"``, ``"$1141"`` tells
  ``"$1141.0"``;
* any other string must not run on into more digits at an end that is a digit: ``"#W12345678"`` does not tell
  ``"#W1234567"``.

Required dollar amounts are answers (:func:`amounts_told`, shared with the τ² labeler): one counts as told when
some assistant text states it and every other dollar amount that text states is also required or was seen in the
conversation (a number in a tool result or a user message: the parts of a total, a price the agent read). A text
listing candidate totals ("$1 $2 … $1299") or a hedge beside a made-up amount ("$568.53 (I first thought
$551.53)") tells nothing; answers to several questions, and other amounts in other texts (a refund after the
answer), stand. The check judges each text on its own: a wrong amount said in another turn, before or after the
right one, is not refused (telling which question a later amount answers would need the question's entity).

A refusal is told by :func:`is_refusal` (the one refusal detector: the target's ineligible requests and the
precondition family's refusal cases both judge by it).
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"(\$?)(\d+(?:\.\d+)?)")
_DOLLARS = re.compile(r"\$\s?(\d+(?:\.\d+)?)")
_BARE = re.compile(r"(?<![\d.$])(\d+(?:\.\d+)?)(?!\d)")
_ANY_NUMBER = re.compile(r"\d+(?:\.\d+)?")
CENT = 0.005
_REFUSAL = re.compile(
    r"\b(cannot|can't|can ?not|unable|not able|will not|won't|refuse|refusing|decline|not allowed|not permitted|"
    r"not eligible|ineligible|not possible|not authori[sz]ed|unauthori[sz]ed|isn't (?:allowed|permitted|eligible|"
    r"possible)|am not going to|not going to be able|can no longer|no longer be|can only|only \w+ orders? can|"
    r"not your order|belongs to (?:another|a different|someone)|do(?:es)? not belong|doesn't belong)\b",
    re.IGNORECASE)


def assistant_texts(transcript: list[dict[str, Any]]) -> list[str]:
    """The non-empty assistant texts of a transcript, in order."""
    texts = (m.get("content") or "" for m in transcript if m.get("role") == "assistant")
    return [t for t in texts if t.strip()]


def is_refusal(text: str) -> bool:
    """Small refusal detector: the text says the agent cannot / will not do it."""
    return bool(_REFUSAL.search(text.replace("’", "'")))


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


def seen_numbers(transcript: list[dict[str, Any]]) -> list[float]:
    """Every number the tool results and the user's messages of ``transcript`` state (what the agent has seen)."""
    texts = (str(m.get("content") or "") for m in transcript if m.get("role") in ("tool", "user"))
    return [float(v) for text in texts for v in _ANY_NUMBER.findall(_normal(text))]


def amounts_told(texts: list[str], required: list[float], seen: list[float] = ()) -> bool:
    """Whether each ``required`` dollar amount is stated in some assistant text (of ``texts``) whose other dollar
    amounts are all required or ``seen`` (:func:`seen_numbers`): the one rule the verifiers and the τ² labeler
    judge an amount by."""
    def among(value: float, values: list[float]) -> bool:
        return any(abs(value - v) < CENT for v in values)

    allowed = [*required, *seen]
    stated = [dollar_amounts(text) for text in texts]
    return all(any(among(v, amounts) and all(among(a, allowed) for a in amounts) for amounts in stated)
               for v in required)


def communicated(transcript: list[dict[str, Any]], required: list[str]) -> bool:
    """Every string of ``required`` is told in some assistant text of ``transcript`` (dollar amounts by
    :func:`amounts_told`)."""
    texts = assistant_texts(transcript)
    dollars = [required_dollars(s) for s in required]
    wanted = [v for v in dollars if v is not None]
    if wanted and not amounts_told(texts, wanted, seen_numbers(transcript)):
        return False
    return all(any(mentions(t, s) for t in texts) for s, v in zip(required, dollars) if v is None)
