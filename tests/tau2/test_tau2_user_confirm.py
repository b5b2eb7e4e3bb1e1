"""The τ² scripted user says "yes" only to confirmation questions, by the rule it shares with retail-sim's user.

No tau2 import: the scripted user reads only ``task.user_scenario.instructions``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trace_envs.core.scripted import asks_to_confirm
from trace_envs.tau2.users import STOP, ScriptedUser

KNOWN = "My name is Yusuf Rossi, zip 19122."


def _user() -> ScriptedUser:
    instructions = SimpleNamespace(reason_for_call="I want to cancel an order.", known_info=KNOWN)
    return ScriptedUser(SimpleNamespace(user_scenario=SimpleNamespace(instructions=instructions)))


@pytest.mark.parametrize("question", [
    "Shall I proceed with cancelling order #W123?",
    "Please confirm: cancel order #W123 because it is no longer needed?",
    "Do you want me to proceed?",
    "Should I go ahead with the cancellation?",
    "I will cancel order #W123 with reason 'no longer needed'. Proceed (yes/no)?",
    "Cancel order #W123 with reason 'no longer needed' (yes/no)?",
    "Would you like me to exchange the lamp for the green one?",
    "Would you like to proceed with the return?",
    "I will refund $54.04 to your card. Is that OK?",
    "Shall I go ahead, or is there anything else?",
    "Is there anything else first? Otherwise shall I cancel it?",
    "Do you want me to go ahead with the exchange? I’ll refund the difference.",
    "Shall I exchange it for something else?",  # "something else" is the exchange's object, not an offer
    "Shall I proceed with the exchange for something else?",
    "Would you like to exchange it for the red one?",  # a clause opening with "would you like to"
    "Do you want to exchange it?",
    "Thanks. Would you like to proceed with the return?",
    "Great — would you like to cancel it?",  # a dash ends a clause
    "Got it - would you like to return it?",
    "I found the blue one for $20 more. Would you like that?",
    "Do you still want to cancel?",
    "Are you sure you want to cancel order #W123?",
    "Refund $54.04 to your credit card. Is this correct?",
    "Proceed (yes or no)?",
    "Cancel it (y/n)?",
])
def test_confirmation_questions_get_a_yes(question):
    assert asks_to_confirm(question)
    assert _user().reply(question).text == "yes"


@pytest.mark.parametrize("question", [
    "Would you like anything else?",
    "Do you want me to look at anything else?",
    "Would you like me to help you with anything else today?",
    "Should I check something else for you?",
    "Is there anything else I can help you with?",
    "Before proceeding, could you tell me your zip code?",
    "Do you want a refund or a gift card?",
    "Your order (yes, the May one) shipped. Anything else?",  # "(yes" alone is no "(yes/no)"
    "Which order would you like to cancel?",  # "would you like to" inside a wh-question
    "What is your confirmation number?",  # "confirmation" is not "confirm"
    "Would you like me to help with anything further?",
])
def test_other_questions_get_no_yes(question):
    assert not asks_to_confirm(question)
    reply = _user().reply(question)
    assert reply.text == KNOWN and not reply.stop


def test_many_permission_phrases_each_followed_by_an_offer():
    """Every phrase is followed by an open offer in its clause: no "yes", whatever the number of phrases."""
    text = "Shall I look for anything else " * 2000 + "?"
    assert not asks_to_confirm(text)
    assert asks_to_confirm(text + " Shall I go ahead?")


def test_idle_questions_are_bounded_and_a_statement_stops():
    user = _user()
    assert [user.reply("Would you like anything else?").text for _ in range(3)] == [KNOWN, KNOWN, STOP]
    assert _user().reply("Your order #W123 has been cancelled.").stop
    assert _user().reply("Shall I proceed with cancelling order #W123.").stop  # no question mark


def test_the_tau2_user_has_no_rule_of_its_own():
    """One place for the rule: the τ² user answers exactly as asks_to_confirm judges."""
    import trace_envs.tau2.users as users

    assert not hasattr(users, "_CONFIRM_WORDS")
    assert users.asks_to_confirm is asks_to_confirm
