"""Required dollar amounts (``trace_envs.core.communication.amounts_told``): a text states the answer beside no
made-up amount, so a spray of candidate totals or a hedge naming a wrong amount tells nothing, on the target and
on the structured family, while the parts of a total, several answers and a refund after the answer stand."""

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from trace_envs.core.communication import communicated
from trace_envs.episode import play_scripted
from trace_envs.families import FamilyExpert
from trace_envs.retail_sim import ScriptedExpert

SPRAY = "Your total is one of: " + " ".join(f"${k}" for k in range(1, 1300)) + "."


def _said(*texts):
    return [{"role": "assistant", "content": t} for t in texts]


@pytest.mark.parametrize("texts,told", [
    (["The total is $568.53."], True),
    (["The total is $568.53. (I first thought $551.53, but that was wrong.)"], False),
    (["The total is $551.53. (Or maybe $568.53.)"], False),
    (["The items cost $500 and $68.53.", "The total is $568.53."], True),  # parts in an earlier text
    (["The items cost $500 and $68.53, so the total is $568.53."], True),  # parts the tool result showed
    (["The total is $551.53.", "Sorry, I added wrong: the total is $568.53."], True),  # a correction
    (["The total is $568.53.", "Your refund of $54.20 is on its way."], True),  # another amount in another text
    (["The total is $568.53.", "Anything else I can help with?"], True),  # a text without amounts
    ([SPRAY.replace("$568", "$568.53")], False),
    (["I could not find that order."], False),
])
def test_a_required_amount_is_told_by_a_text_with_no_made_up_amount_beside_it(texts, told):
    seen = [{"role": "tool", "content": '{"items": [{"price": 500.0}, {"price": 68.53}], "amount": 568.53}'}]
    assert communicated(seen + _said(*texts), ["$568.53"]) is told


def test_every_required_amount_stated_and_other_strings_anywhere():
    from trace_envs.core.communication import amounts_told  # the one rule the τ² labeler shares

    both = _said("Order #W1 is not yours.", "You paid $5 for order #W2. You paid $7 for order #W3.")
    assert communicated(both, ["$5", "$7", "#W1"])
    assert communicated(_said("You paid $5 for order #W2.", "You paid $7 for order #W3."), ["$5", "$7"])
    assert not communicated(_said("You paid $5 for order #W2.", "You paid $7 for order #W3."), ["$5", "$8"])
    assert not communicated(both, ["$5", "#W9"])
    assert amounts_told(["It is $5 or $6."], [5.0], seen=[6.0]) and not amounts_told(["It is $5 or $6."], [5.0])


def test_a_question_then_a_refunded_return_on_retail_sim_is_told():
    import numpy as np

    from trace_envs.retail_sim.scenario import generate_scenario

    scenario = generate_scenario(np.random.default_rng(0), seed=0, kinds=["question", "return"])
    question, ret = scenario.intents[0], scenario.intents[1]
    transcript = _said(f"You paid {scenario.communicate[0]} for the items in order {question.order_id}.",
                       f"The return of order {ret.order_id} is requested; a refund of $54.20 will follow.")
    assert communicated(transcript, scenario.communicate)


def test_a_spray_earns_nothing_on_the_target_and_on_the_structured_family():
    for env in (gym.make("trace/retail-sim-v0", kinds=["question"]),
                gym.make("trace/structured_data_reasoning-v0", question_fraction=1.0)):
        for seed in range(5):
            env.reset(seed=seed)
            _, reward, *_ = env.step(SPRAY)
            assert reward == 0.0, (env.spec.id, seed)


def test_a_hedge_earns_nothing_and_the_plain_answer_still_does():
    env = gym.make("trace/structured_data_reasoning-v0", question_fraction=1.0)
    for seed in range(5):
        _, info = env.reset(seed=seed)
        gold = info["task"]["gold"]["communicate"][0]
        wrong = f"${float(gold[1:]) + 17:.2f}"
        _, reward, *_ = env.step(f"The total is {gold}. (I first thought {wrong}, but that was wrong.)")
        assert reward == 0.0
        env.reset(seed=seed)
        _, reward, *_ = env.step(f"The total is {gold}.")
        assert reward == 1.0


def test_the_scripted_oracle_still_solves_every_question():
    target = gym.make("trace/retail-sim-v0", kinds=["question", "question"])
    family = gym.make("trace/structured_data_reasoning-v0", question_fraction=1.0)
    for seed in range(10):
        assert play_scripted(target, ScriptedExpert(seed=seed), seed).reward == 1.0
        assert play_scripted(family, FamilyExpert(seed=seed), seed).reward == 1.0
