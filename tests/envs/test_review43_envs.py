"""Review round 4 of the envs (session 43): each test fails on the code before its fix.

1. precondition_verification: a refusal counts only after the agent read the record it refuses about, on every
   domain (one rule, ``trace_envs.families.base.checked_at``); a blanket refusal with no lookup scores 0.
2. retail-sim target: an ineligible request is told only by a text that refuses and names its order, with no
   accepted write on it; echoing the user's request, or claiming the work done, is not a refusal.
3. The scripted user says yes to the usual confirmation questions, not only to ones saying "confirm".
4. Exchanges and item changes whose request names no payment method: any method of the user the tools accept.
5. An agent-chosen tool-call id longer than ``NAME_ECHO_CHARS`` is dropped (the env numbers the call).
6. ``gift_card_rate``: the docstring says what the draws keep, not "the same draws at any rate".
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest

import trace_envs  # noqa: F401
from tests.tau2.conftest import requires_tau2
from trace_envs.core.parsing import NAME_ECHO_CHARS, format_tool_call
from trace_envs.core.scripted import asks_to_confirm
from trace_envs.episode import play_scripted
from trace_envs.families.experts import FamilyExpert
from trace_envs.families.precision import PREFILL_ASK
from trace_envs.retail_sim import ScriptedExpert
from trace_envs.retail_sim.env import RetailSimEnv
from trace_envs.retail_sim.scenario import generate_scenario
from trace_envs.retail_sim.tools import SETTLEMENT_TOOLS, payment_left_open, settle_as_chosen
from trace_envs.retail_sim.user import ScriptedUser
from trace_envs.splits import split_seeds

PRECONDITION = "trace/precondition_verification-v0"
STRUCTURED = "trace/structured_data_reasoning-v0"
MULTI_STEP = "trace/multi_step_task_completion-v0"
TAU2 = [pytest.mark.tau2, requires_tau2]
BLANKET = ("I cannot do this for {entity}: it is not your order or booking (it belongs to another user), I cannot "
           "verify your identity, and its status (pending, processed, delivered, cancelled) or the policy (basic "
           "economy, business, insurance, 24 hours, bags are not removed) does not allow it.")


def _request(info: dict) -> dict:
    return info["task"]["gold"]["requests"][0]


# -- 1. precondition_verification: a refusal rests on a read ---------------------------------------------------------
@pytest.mark.parametrize("domain", ["retail-sim", pytest.param("tau2-retail", marks=TAU2),
                                    pytest.param("tau2-airline", marks=TAU2)])
def test_blanket_refusal_without_lookup_scores_zero(domain):
    env = gym.make(PRECONDITION, domain=domain, refuse_fraction=0.9)
    refusal_cases = 0
    for seed in split_seeds("test", 50 if domain == "retail-sim" else 15):
        obs, info = env.reset(seed=seed)
        request = _request(info)
        assert request["entity_id"] in obs[-1]["content"]  # the user names it: no lookup needed to name it
        _, reward, terminated, _, end = env.step(BLANKET.format(entity=request["entity_id"]))
        assert terminated
        if request["case"] != "allow":
            refusal_cases += 1
            assert reward == 0.0 and not end["success"], (seed, request["case"], end["reward_breakdown"])
            assert end["reward_breakdown"]["checked"] == 0.0
    assert refusal_cases >= 10


def _lookup(domain: str) -> str:
    return "get_reservation_details" if domain == "tau2-airline" else "get_order_details"


def _entity_arg(domain: str) -> str:
    return "reservation_id" if domain == "tau2-airline" else "order_id"


@pytest.mark.parametrize("domain", ["retail-sim", pytest.param("tau2-airline", marks=TAU2)])
def test_a_refusal_before_the_lookup_does_not_count_one_after_it_does(domain):
    env = gym.make(PRECONDITION, domain=domain, refuse_fraction=1.0)
    for seed in split_seeds("test", 8):
        obs, info = env.reset(seed=seed)
        entity = _request(info)["entity_id"]
        text = BLANKET.format(entity=entity)
        env.step(f"{text} Is there anything else?")  # refuses first: a question, so the user answers
        env.step(format_tool_call(_lookup(domain), {_entity_arg(domain): entity}))
        _, reward, _, _, end = env.step("Goodbye.")
        assert reward == 0.0, (seed, end["reward_breakdown"])
        assert end["reward_breakdown"]["checked"] == 1.0 and end["reward_breakdown"]["refused"] == 0.0
        # the same refusal after the read scores (the blanket text names the reason too)
        env.reset(seed=seed)
        env.step(format_tool_call(_lookup(domain), {_entity_arg(domain): entity}))
        _, reward, _, _, end = env.step(text)
        assert reward == 1.0, (seed, end["reward_breakdown"])


def test_a_failed_read_or_a_read_of_another_record_is_no_check():
    env = gym.make(PRECONDITION, refuse_fraction=1.0)
    obs, info = env.reset(seed=split_seeds("test", 1)[0])
    entity = _request(info)["entity_id"]
    env.step(format_tool_call("get_order_details", {"order_id": entity + "9"}))  # not found: an Error
    env.step(format_tool_call("get_user_details", {"user_id": info["task"]["user_id"]}))  # another record
    _, reward, _, _, end = env.step(BLANKET.format(entity=entity))
    assert reward == 0.0 and end["reward_breakdown"]["checked"] == 0.0


@pytest.mark.tau2
@requires_tau2
def test_tau2_authentication_refusal_rests_on_the_failed_identification():
    """τ² retail's authentication case: the read is the lookup of the identity the user gave, which fails; the agent
    need not (and by τ²'s policy should not) read the order of a user it could not authenticate."""
    env = gym.make(PRECONDITION, domain="tau2-retail")
    for seed in split_seeds("test", 4):
        obs, info = env.reset(seed=seed, options={"case": "authentication"})
        entity = _request(info)["entity_id"]
        name, args = info["task"]["identify"]
        text = f"I cannot help with {entity}: I could not verify your identity."
        env.step(format_tool_call(name, args))
        _, reward, _, _, end = env.step(text)
        assert reward == 1.0, end["reward_breakdown"]
        env.reset(seed=seed, options={"case": "authentication"})
        _, reward, _, _, _ = env.step(text)  # the same words, no lookup
        assert reward == 0.0


@pytest.mark.parametrize("domain", ["retail-sim", pytest.param("tau2-retail", marks=TAU2),
                                    pytest.param("tau2-airline", marks=TAU2)])
def test_the_family_experts_keep_their_precondition_rewards(domain):
    env = gym.make(PRECONDITION, domain=domain, refuse_fraction=0.9)
    for seed in split_seeds("test", 30 if domain == "retail-sim" else 10):
        assert play_scripted(env, FamilyExpert(), seed).reward == 1.0


# -- 2. retail-sim target: an ineligible request is told by a refusal -------------------------------------------------
def _ownership_cancel_seed(env: RetailSimEnv) -> int:
    for seed in split_seeds("test", 200):
        intent = env.reset(seed=seed)[1]["task"]["intents"][0]
        if intent["ineligible_reason"] == "ownership":
            return seed
    raise AssertionError("no ownership-ineligible cancel in 200 seeds")


def test_echoing_the_request_is_not_a_refusal():
    env = RetailSimEnv(n_intents=1, kinds=["cancel"])
    seed = _ownership_cancel_seed(env)
    obs, info = env.reset(seed=seed)
    _, reward, terminated, _, end = env.step("You said: " + obs[0]["content"].replace("?", "."))
    assert terminated and end["termination"] == "user_stop"
    assert reward == 0.0 and end["reward_breakdown"]["communicate"] == 0.0


def test_claiming_the_work_done_after_lookups_is_not_a_refusal():
    env = RetailSimEnv(n_intents=1, kinds=["cancel"])
    seed = _ownership_cancel_seed(env)
    obs, info = env.reset(seed=seed)
    order_id = info["task"]["intents"][0]["order_id"]
    env.step(format_tool_call("get_order_details", {"order_id": order_id}))
    _, reward, _, _, end = env.step(f"Done! I have taken care of order {order_id} as you asked.")
    assert reward == 0.0 and not end["success"]
    # a refusal that names the order, after the same lookup, is the right answer
    env.reset(seed=seed)
    for action in (format_tool_call("find_user_id_by_email", {"email": info["task"]["identity"]["email"]}),
                   format_tool_call("get_order_details", {"order_id": order_id})):
        env.step(action)
    _, reward, _, _, end = env.step(f"I cannot cancel order {order_id}: it is not your order.")
    assert reward == 1.0 and end["success"]


def test_a_refusal_must_name_the_order_and_no_write_may_go_through():
    env = RetailSimEnv(n_intents=1, kinds=["cancel"])
    seed = _ownership_cancel_seed(env)
    _, info = env.reset(seed=seed)
    order_id = info["task"]["intents"][0]["order_id"]
    # a refusal naming no order, beside a text naming the order without refusing
    env.step(f"Let me look at order {order_id}. One moment, is that fine?")
    _, reward, _, _, _ = env.step("Sorry, I cannot do that.")
    assert reward == 0.0
    episode = env._episode  # the accepted-write rule alone (the DB check catches it too)
    episode.writes.append({"name": "cancel_pending_order", "arguments": {"order_id": order_id}, "error": False})
    text = [{"role": "assistant", "content": f"I cannot cancel order {order_id}: it is not your order."}]
    assert not episode.refused(order_id, text)
    episode.writes[-1]["error"] = True  # a write the tools rejected changed nothing
    assert episode.refused(order_id, text)


def test_the_target_experts_keep_their_rewards_on_ineligible_requests():
    env = gym.make("trace/retail-sim-v0")
    seeds = split_seeds("test", 60)
    assert all(play_scripted(env, ScriptedExpert(), s).reward == 1.0 for s in seeds)


# -- 3. the scripted user: confirmation questions ---------------------------------------------------------------------
def _user() -> ScriptedUser:
    return ScriptedUser(generate_scenario(np.random.default_rng(0)))


@pytest.mark.parametrize("question", [
    "Shall I go ahead and cancel order #W1234567?",
    "Would you like me to proceed?",
    "Should I return the lamp of order #W1234567 with the refund to your card?",
    "Do you want me to exchange it for the green one?",
    "I will cancel order #W1234567. Is that OK?",
    "Can I go ahead?",
    PREFILL_ASK,
    "Please confirm: cancel order #W1 because the item is no longer needed?",
])
def test_the_usual_confirmation_questions_get_a_yes(question):
    assert asks_to_confirm(question)
    assert _user().reply(question).text == "yes"


@pytest.mark.parametrize("question, expected", [
    ("Which order do you mean?", "I have nothing to add, please go ahead."),
    ("Is there anything else I can help with?", "I have nothing to add, please go ahead."),
    ("What is your email?", None),
    ("Before I go ahead, what is your email address?", None),
    ("Shall I go ahead and cancel order #W1234567.", "###STOP###"),  # no question mark: the user stops
])
def test_other_questions_get_no_yes(question, expected):
    user = _user()
    reply = user.reply(question).text
    assert reply == (expected or user.identity_sentence())


class _Rephrased:
    """The oracle, asking "Shall I go ahead and ...?" where it says "Please confirm: ...?"."""

    name = "oracle-rephrased"

    def __init__(self, inner):
        self.inner = inner

    def reset(self, obs, info, seed=None):
        self.inner.reset(obs, info, seed=seed)

    def act(self, obs):
        action = self.inner.act(obs)
        return action.replace("Please confirm: ", "Shall I go ahead and ", 1)


def test_an_oracle_confirming_in_its_own_words_finishes_five_requests():
    env = gym.make(MULTI_STEP, min_ops=4, max_ops=5, completion_weight=1.0)
    for seed in split_seeds("test", 12):
        result = play_scripted(env, _Rephrased(FamilyExpert()), seed)
        assert result.reward == 1.0, [m["content"] for m in result.transcript if m["role"] == "user"][-3:]


# -- 4. payment method of exchanges and item changes ------------------------------------------------------------------
class _PaysWith:
    """An expert that asks which payment method to use and settles every exchange / item change with
    ``pick(obs, info)`` (a method of the user the tools accept) instead of the original one."""

    name = "pays-with"

    def __init__(self, inner, pick, new_item=None):
        self.inner, self.pick, self.new_item = inner, pick, new_item
        self.pending = None

    def reset(self, obs, info, seed=None):
        self.inner.reset(obs, info, seed=seed)
        self.info, self.pending, self.seen = info, None, list(obs)

    def act(self, obs):
        self.seen.extend(obs)
        if self.pending is not None:
            action, self.pending = self.pending, None
            return action
        action = self.inner.act(obs)
        match = re.search(r"<tool_call>\s*(\{.*\})\s*</tool_call>", action, re.S)
        call = json.loads(match.group(1)) if match else {}
        if call.get("name") in SETTLEMENT_TOOLS:
            method = self.pick(self.seen, self.info)
            if method:
                call["arguments"]["payment_method_id"] = method
                if self.new_item:
                    call["arguments"]["new_item_ids"] = [self.new_item(self.info)]
                self.pending = format_tool_call(call["name"], call["arguments"])
                return "Which payment method should I use for the price difference?"
        return action


def _gift_card(obs, info):
    return info["task"]["gift_card"]


def _errors(transcript):
    return [m["content"] for m in transcript if m["role"] == "tool" and m["content"].startswith("Error")]


@pytest.mark.parametrize("kind", ["exchange", "modify_items"])
def test_the_target_accepts_the_users_gift_card_for_an_exchange(kind):
    env = RetailSimEnv(n_intents=1, kinds=[kind])
    clean = 0
    for seed in split_seeds("test", 60):
        if not env.reset(seed=seed)[1]["task"]["gift_card"]:
            continue
        result = play_scripted(env, _PaysWith(ScriptedExpert(), _gift_card), seed)
        if _errors(result.transcript):  # the card's balance does not cover the difference: the tools refuse it
            assert result.reward == 0.0
            continue
        clean += 1
        assert result.reward == 1.0 and result.info["success"], (seed, result.info["reward_breakdown"])
        # the rest of the end state must still match: the decoy variant paid with the same card fails
        decoy = _PaysWith(ScriptedExpert(), _gift_card, new_item=lambda info: info["task"]["intents"][0][
            "distractor_item_id"])
        assert play_scripted(env, decoy, seed).reward == 0.0
    assert clean >= 5


def test_the_structured_family_accepts_the_users_gift_card():
    env = gym.make(STRUCTURED, question_fraction=0.0)
    clean = 0
    for seed in split_seeds("test", 60):
        if not env.reset(seed=seed)[1]["task"]["gift_card"]:
            continue
        result = play_scripted(env, _PaysWith(FamilyExpert(), _gift_card), seed)
        if not _errors(result.transcript):
            clean += 1
            assert result.reward == 1.0, (seed, result.info["reward_breakdown"])
    assert clean >= 5


def _other_tau2_method(obs, info):
    """A payment method of the τ² user other than the order's original one and not a gift card (no balance)."""
    details = [m["content"] for m in obs if m["role"] == "tool" and '"payment_methods"' in m["content"]]
    orders = [json.loads(m["content"]) for m in obs if m["role"] == "tool" and '"payment_history"' in m["content"]]
    if not details or not orders:
        return None
    original = orders[-1]["payment_history"][0]["payment_method_id"]
    methods = json.loads(details[-1])["payment_methods"]
    others = sorted(p for p, m in methods.items() if m["source"] != "gift_card" and p != original)
    return others[0] if others else None


@pytest.mark.tau2
@requires_tau2
def test_tau2_retail_selections_accept_another_method_of_the_user():
    env = gym.make(STRUCTURED, domain="tau2-retail", question_fraction=0.0)
    changed = 0
    for seed in split_seeds("test", 40):
        policy = _PaysWith(FamilyExpert(), _other_tau2_method)
        result = play_scripted(env, policy, seed)
        paid = [c["function"]["arguments"] for m in result.transcript for c in m.get("tool_calls") or []
                if c["function"]["name"] in SETTLEMENT_TOOLS]
        if not _errors(result.transcript):
            assert result.reward == 1.0, (seed, paid)
            changed += any(json.loads(a)["payment_method_id"] != w[1]["payment_method_id"]
                           for a in paid for w in result.reset_info["task"]["gold_actions"])
    assert changed >= 3


def test_a_stated_method_is_the_only_one():
    gold = [("exchange_delivered_order_items", {"order_id": "#W1", "item_ids": ["1"], "new_item_ids": ["2"],
                                                "payment_method_id": "credit_card_1"})]
    writes = [{"name": "exchange_delivered_order_items", "error": False,
               "arguments": {**gold[0][1], "payment_method_id": "gift_card_2"}}]
    assert settle_as_chosen(gold, writes, ["#W1"])[0][1]["payment_method_id"] == "gift_card_2"
    assert settle_as_chosen(gold, writes, [])[0][1]["payment_method_id"] == "credit_card_1"
    writes[0]["error"] = True  # a method the tools refused is no choice
    assert settle_as_chosen(gold, writes, ["#W1"]) == gold
    returns = [("return_delivered_order_items", {"order_id": "#W1", "item_ids": ["1"],
                                                 "payment_method_id": "gift_card_2"})]
    writes = [{"name": "return_delivered_order_items", "error": False,
               "arguments": {**returns[0][1], "payment_method_id": "credit_card_1"}}]
    assert settle_as_chosen(returns, writes, ["#W1"]) == returns  # a refund's method is never left open
    assert payment_left_open("I'd like to exchange the lamp in order #W1 for a green one that costs at most 80 "
                             "dollars.")
    assert payment_left_open("I'd like to exchange the Portable Charger in order #W1 for the one with color black.")
    for stated in ("I want to return the mug from order #W1 and get the refund on my gift card.",
                   "Please move my reservation ABC123 1 day later, with any difference paid with credit_card_7.",
                   "Exchange the lamp in order #W1 for a green one and charge my PayPal."):
        assert not payment_left_open(stated)


def test_a_precision_return_asking_for_the_gift_card_still_needs_it():
    env = gym.make("trace/tool_calling_precision-v0", request_kinds=["return"], perturb_prob=0.0)
    for seed in split_seeds("test", 10):
        assert play_scripted(env, FamilyExpert({"precision": 1.0}), seed).reward == 0.0
        assert play_scripted(env, FamilyExpert(), seed).reward == 1.0


# -- 5. an agent-chosen call id is echoed at most NAME_ECHO_CHARS long ------------------------------------------------
@pytest.mark.parametrize("form", ["dict", "text"])
def test_a_huge_call_id_is_dropped_and_the_observation_fits_its_slot(form):
    env = gym.make("trace/retail-sim-v0")
    env.reset(seed=1)
    huge = "x" * 1_200_000
    if form == "dict":
        action = {"role": "assistant", "content": "", "tool_calls": [
            {"id": huge, "type": "function", "function": {"name": "list_all_product_types", "arguments": "{}"}}]}
    else:
        action = ('<tool_call>{"id": "' + huge + '", "function": {"name": "list_all_product_types", '
                  '"arguments": {}}}</tool_call>')
    obs, *_ = env.step(action)
    assert len(json.dumps(obs, ensure_ascii=False).encode()) <= env.unwrapped.observation_space.max_bytes
    assert obs[0]["tool_call_id"] == "call_1"
    fits = "y" * NAME_ECHO_CHARS  # an id up to the cap is kept
    obs, *_ = env.step({"role": "assistant", "content": "", "tool_calls": [
        {"id": fits, "type": "function", "function": {"name": "list_all_product_types", "arguments": "{}"}}]})
    assert obs[0]["tool_call_id"] == fits


# -- 6. gift_card_rate: what the draws keep ------------------------------------------------------------------------
def test_the_gift_card_rate_docstring_says_what_the_draws_keep():
    doc = " ".join(generate_scenario.__doc__.split())
    assert "the same draws at any rate" not in doc
    moved, same_request = 0, True
    for seed in range(60):
        a = generate_scenario(np.random.default_rng(seed), n_intents=1, kinds=["return"], gift_card_rate=0.5)
        b = generate_scenario(np.random.default_rng(seed), n_intents=1, kinds=["return"], gift_card_rate=1.0)
        key = [(i.order_id, i.item_id, i.eligible) for i in a.intents]
        same_request &= key == [(i.order_id, i.item_id, i.eligible) for i in b.intents]
        moved += (a.identify_by != b.identify_by
                  or a.db["users"][a.user.user_id]["orders"] != b.db["users"][b.user.user_id]["orders"])
    assert same_request  # "A task with one return keeps its request ... at any rate"
    assert moved > 0  # "... the filler order and the identity mode (identify_by) can differ"


@pytest.mark.parametrize("says", [
    "I cannot cancel order {o}: it is not your order.",
    "Unfortunately order {o} has already been delivered, so it can no longer be cancelled.",
    "Order {o} is not pending; only pending orders can be cancelled.",
    "I'm sorry, but I can only cancel pending orders, and order {o} is already delivered.",
])
def test_an_ordinary_refusal_wording_of_a_status_ineligible_cancel_is_credited(says):
    env = RetailSimEnv(n_intents=1, kinds=["cancel"])
    for seed in split_seeds("test", 200):
        _, info = env.reset(seed=seed)
        intent = info["task"]["intents"][0]
        if intent["ineligible_reason"] == "status":
            break
    else:
        raise AssertionError("no status-ineligible cancel in 200 seeds")
    order_id = intent["order_id"]
    env.step(format_tool_call("find_user_id_by_email", {"email": info["task"]["identity"]["email"]}))
    env.step(format_tool_call("get_order_details", {"order_id": order_id}))
    _, reward, _, _, end = env.step(says.format(o=order_id))
    assert reward == 1.0 and end["success"], end["reward_breakdown"]
