"""What the scripted (rule-based) experts and users of the tool-use domains share.

* :class:`GeneratorScript`: an expert written as a generator (``_script`` yields each action and is sent
  the next observation); ``act`` drives it and closes the conversation once it is spent.
* :class:`ScriptedUserReplies`: the scripted user's reply rules (stop on a non-question, yes to a
  confirmation, the identity when asked for it, a bounded number of idle replies).

What counts as a confirmation question (:func:`asks_to_confirm`): a turn with a "?" that says "confirm" (as the
scripted experts' "Please confirm: ...?"; "confirmation" does not count), or that asks leave to act in the usual
words -- "proceed", "go ahead", "shall I", "should I", "would you like me to", "do you want me to", "is that
ok(ay) / correct / right", "are you sure", "(yes/no)", "(yes or no)", "(y/n)" (whole words, any case) -- or a
clause that opens with "would you (still / also / really) like to", "do you (...) want to", or is "would you like
that / this / it" ("Would you like to proceed with the return?"; "Which order would you like to cancel?" asks about
the request, not leave to act). The turn is read clause by clause (a clause ends at ? ! . , ; : a dash or the word
"or"); a permission phrase followed in its own clause by an open offer -- "anything else / more / further",
"something else for you" / "something else I can" -- offers more help rather than asking leave: "Do you want me to
look at anything else?" gets no "yes", "Shall I exchange it for something else?" does. A permission phrase
answers "yes" only when the turn asks for no identity detail: "Before I go ahead, what is your email?" gets the
identity. Any other question ("Which order?", "Would you like anything else?") is idle talk. The τ² scripted user
(``trace_envs.tau2.users``) answers confirmations by the same :func:`asks_to_confirm` (it has no identity rule:
its user states what it knows at the start).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

from trace_envs.core.tool_env import STOP_TOKEN, UserReply

Observation = list[dict[str, Any]]
Script = Generator[str, Observation, None]
_LEAVE_TO_ACT = re.compile(r"\b(?:proceed|go ahead|shall i|should i|would you like me to|do you want me to|"
                           r"is (?:that|this) (?:ok|okay|correct|right)|are you sure)\b|"
                           r"\(\s*(?:yes\s*(?:/|or)\s*no|y\s*/\s*n)\s*\)", re.IGNORECASE)
_ASKS_WHETHER = re.compile(r"^\s*(?:(?:and|so|then|now|otherwise)\s+)?(?:would you|do you)\s+(?:still\s+|also\s+|"
                           r"really\s+)?(?:like|want)\s+(?:to\b|(?:that|this|it)\s*$)", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[?!.,;:\u2014\u2013]|\s-\s|\bor\b", re.IGNORECASE)
_OPEN_OFFER = re.compile(r"\banything (?:else|more|further)\b|\bsomething else (?:for you|i can)\b", re.IGNORECASE)
_CONFIRM = re.compile(r"confirm(?!ation)", re.IGNORECASE)


def _clauses(text: str):
    start = 0
    for end in _CLAUSE_END.finditer(text):
        yield text[start:end.start()]
        start = end.end()
    yield text[start:]


def _asks_leave(clause: str) -> bool:
    """Whether one clause asks leave to act: a permission phrase with no open offer after it in the clause."""
    offers = [m.start() for m in _OPEN_OFFER.finditer(clause)]
    last_offer = offers[-1] if offers else -1
    phrases = [m.end() for m in _LEAVE_TO_ACT.finditer(clause)]
    whether = _ASKS_WHETHER.match(clause)
    if whether:
        phrases.append(whether.end())
    return any(end > last_offer for end in phrases)


def asks_to_confirm(text: str) -> bool:
    """Whether an assistant turn asks the user to confirm: a question that says "confirm" or asks leave to act,
    not an open offer of more help (see the module docstring; linear in the text's length). Identity questions are
    judged first by :class:`ScriptedUserReplies`."""
    if "?" not in text:
        return False
    if _CONFIRM.search(text):
        return True
    return any(_asks_leave(clause) for clause in _clauses(text.replace("’", "'")))


def last_tool_output(obs: Observation) -> str:
    """The content of the last tool message of ``obs`` ("" when there is none)."""
    tools = [m for m in obs if m.get("role") == "tool"]
    return tools[-1]["content"] if tools else ""


class GeneratorScript:
    """Mixin for a scripted policy whose episode is a generator: ``_start(script)`` at reset, then ``act``."""

    _gen: Script | None = None
    _first: bool = True

    def _start(self, script: Script) -> None:
        self._gen = script
        self._first = True

    def act(self, observation: Observation) -> str:
        """The script's next action (the first call primes it); a polite stop once the script has ended."""
        if self._gen is None:
            raise RuntimeError("call reset() first")
        try:
            if self._first:
                self._first = False
                return next(self._gen)
            return self._gen.send(observation)
        except StopIteration:
            return f"Thank you. {STOP_TOKEN}"


class ScriptedUserReplies:
    """Mixin for a deterministic user: subclasses set ``identity_words`` and implement ``_identity_text``."""

    identity_words: tuple[str, ...] = ()
    max_idle_replies: int = 2
    idle_replies: int = 0

    def _identity_text(self) -> str:
        raise NotImplementedError

    def reply(self, assistant_text: str) -> UserReply:
        """Stop on a non-question; "yes" to "confirm"; the identity when asked; "yes" to a request for leave to act
        (:func:`asks_to_confirm`); else go ahead (bounded: the user stops after ``max_idle_replies`` idle turns)."""
        text = assistant_text.lower()
        if "?" not in text:
            return UserReply(STOP_TOKEN, stop=True)
        if "confirm" in text:
            return UserReply("yes")
        if any(word in text for word in self.identity_words):
            return UserReply(self._identity_text())
        if asks_to_confirm(assistant_text):
            return UserReply("yes")
        self.idle_replies += 1
        if self.idle_replies > self.max_idle_replies:
            return UserReply(STOP_TOKEN, stop=True)
        return UserReply("I have nothing to add, please go ahead.")
