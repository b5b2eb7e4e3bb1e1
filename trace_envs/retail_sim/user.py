"""The scripted retail-sim user: deterministic, answers identification and confirmation questions."""

from __future__ import annotations

from trace_envs.core.tool_env import STOP_TOKEN, UserReply
from trace_envs.retail_sim.scenario import Scenario

_IDENTITY_WORDS = ("email", "zip", "name")
MAX_IDLE_REPLIES = 2


class ScriptedUser:
    """Opens with every request at once; says yes to confirmations; stops on a non-question."""

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

    def reply(self, assistant_text: str) -> UserReply:
        text = assistant_text.lower()
        if "?" not in text:
            return UserReply(STOP_TOKEN, stop=True)
        if "confirm" in text:
            return UserReply("yes")
        if any(word in text for word in _IDENTITY_WORDS):
            return UserReply(self.identity_sentence())
        self.idle_replies += 1
        if self.idle_replies > MAX_IDLE_REPLIES:
            return UserReply(STOP_TOKEN, stop=True)
        return UserReply("I have nothing to add, please go ahead.")
