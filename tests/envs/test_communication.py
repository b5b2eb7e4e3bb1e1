"""τ²'s COMMUNICATE rule as every env here checks it (``trace_envs.core.communication``)."""

import pytest

from trace_envs.core.communication import communicated, mentions


@pytest.mark.parametrize("text,required,told", [
    ("You paid $150 for it.", "$150", True),
    ("You paid $150.00, thanks", "$150", True),
    ("You paid $1,141.", "$1141.0", True),  # tau2-retail writes totals as $X.0
    ("Total: $ 897.70", "$897.7", True),
    ("You paid $1509 for it.", "$150", False),  # a longer number is another value
    ("You paid $897.77", "$897.7", False),
    ("You paid 150 dollars", "$150", False),  # the $ is part of the required form
    ("It costs 42 in total", "42", True),
    ("It costs 142 in total", "42", False),
    ("It costs $42", "42", False),
    ("Order #W1234567 is cancelled.", "#w1234567", True),
    ("Order #W12345678 is cancelled.", "#W1234567", False),
    ("Orders #W12345678 and #W1234567.", "#W1234567", True),
    ("Flight HAT123 is booked", "hat123", True),
    ("Your new address is 12 Main St", "Main St", True),
])
def test_mentions(text, required, told):
    assert mentions(text, required) is told


def test_communicated_needs_every_string_in_some_assistant_text():
    transcript = [{"role": "user", "content": "$5 and #W1"}, {"role": "assistant", "content": "It was $5."},
                  {"role": "assistant", "content": "Order #W1 done."}]
    assert communicated(transcript, ["$5", "#W1"]) and communicated(transcript, [])
    assert not communicated(transcript, ["$5", "#W2"])
    assert not communicated(transcript[:1], ["$5"])  # the user's words are not the agent's
