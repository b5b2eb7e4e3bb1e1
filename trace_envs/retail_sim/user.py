"""The scripted retail-sim user: deterministic, answers identification and confirmation questions."""

from __future__ import annotations

from trace_envs.core.scripted import ScriptedUserReplies
from trace_envs.retail_sim.scenario import Scenario

_IDENTITY_WORDS = ("email", "zip", "name")
MAX_IDLE_REPLIES = 2


class ScriptedUser(ScriptedUserReplies):
    """Opens with every request at once; says yes to confirmations; stops on a non-question."""

    identity_words = _IDENTITY_WORDS
    max_idle_replies = MAX_IDLE_REPLIES

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.idle_replies = 0

    def identity_sentence(self) -> str:
        user = self.scenario.user
        if self.scenario.identify_by == "email":
            return f"My email is {user.email}."
        return f"I am {user.first_name} {user.last_name}, zip code {user.zip}."

    def opening(self) -> str:
        requests = " ".join(intent.utterance for intent in self.scenario.intents)
        return f"Hi! {self.identity_sentence()} {requests}"

    def _identity_text(self) -> str:
        return self.identity_sentence()
