"""Capability env families: oracle = 1.0, knob isolation, check_env, determinism, reward tables."""

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import trace_envs  # noqa: F401
from trace_envs.core.parsing import format_tool_call
from trace_envs.families import FAMILIES, FamilyExpert, effective_knobs, play
from trace_envs.families.base import is_refusal
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB

CAPS = sorted(FAMILIES)
KNOBS = ("precondition", "structured", "multi_step", "precision")


@pytest.fixture(scope="module", params=CAPS)
def family(request):
    return request.param, gym.make(f"trace/{request.param}-v0")


def mean_reward(env, knobs, seeds, expert_seed=1):
    return float(np.mean([play(env, FamilyExpert(knobs, seed=expert_seed), s)[0] for s in seeds]))


def test_oracle_scores_one_on_500_seeds(family):
    cap, env = family
    cases = set()
    for seed in range(500):
        reward, info = play(env, FamilyExpert(), seed)
        assert reward == 1.0 and info["success"], (cap, seed, info.get("reward_breakdown"), info["termination"])
        task = info["task"]
        assert task["capability"] == cap and {"case", "gold", "difficulty", "hazards"} <= set(task)
        cases.add(task["case"])
    assert len(cases) >= 2, cases  # the family mixes cases (refuse/allow, selection/question, ...)


def test_knob_isolation(family):
    """Only the family's own knob (at 1.0) costs >= 0.3; every other knob alone moves it <= 0.1."""
    cap, env = family
    seeds = range(1000, 1200)
    oracle = mean_reward(env, {}, seeds)
    own = CAPABILITY_TO_KNOB[cap]
    for knob in KNOBS:
        score = mean_reward(env, {knob: 1.0}, seeds)
        if knob == own:
            assert oracle - score >= 0.3, (cap, knob, oracle, score)
        else:
            assert abs(oracle - score) <= 0.1, (cap, knob, oracle, score)


def test_check_env_and_determinism(family):
    cap, env = family
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    expert = {"precondition": 0.5, "structured": 0.5, "multi_step": 0.5, "precision": 0.5}
    runs = []
    for seed in (7, 7, 8):
        obs, info = env.reset(seed=seed)
        reward, final = play(env, FamilyExpert(expert, seed=3), seed)
        runs.append((json.dumps(obs), json.dumps(info, sort_keys=True), reward, json.dumps(env.unwrapped.transcript)))
    assert runs[0] == runs[1]
    assert runs[0][1] != runs[2][1]


def test_unknown_domain_lists_known_ones():
    with pytest.raises(ValueError, match="unknown domain 'nope'.*retail-sim"):
        gym.make("trace/precondition_verification-v0", domain="nope")


def test_fresh_process_gym_make_with_module_prefix():
    code = ("import gymnasium as gym\n"
            "for cap in %r:\n"
            "    env = gym.make(f'trace_envs:trace/{cap}-v0')\n"
            "    obs, info = env.reset(seed=0)\n"
            "    assert info['task']['capability'] == cap and info['tools']\n"
            "print('ok')\n" % CAPS)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_refusal_detector():
    assert is_refusal("Sorry, I cannot cancel order #W1: it is not your order.")
    assert is_refusal("I can't do that") and is_refusal("That order is not eligible for a return.")
    assert not is_refusal("Order #W1 is cancelled.") and not is_refusal("Please confirm: cancel order #W1?")
    for phrasing in ("I will not cancel it", "I won't cancel it", "Cancelling it isn't allowed",
                     "I'm not authorized to cancel it", "I have to decline", "I am not going to cancel it"):
        assert is_refusal(phrasing), phrasing


@pytest.mark.parametrize("refusal", ["I cannot cancel order {oid}: it belongs to another customer.",
                                     "I will not cancel order {oid}: it belongs to another customer.",
                                     "I won\u2019t cancel order {oid} because it belongs to another customer.",
                                     "Sorry, I'm not authorized to cancel order {oid}; it belongs to another "
                                     "customer."])
def test_an_explained_refusal_scores_one_whatever_its_phrasing(refusal):
    env = gym.make("trace/precondition_verification-v0")
    oid = lambda t: t["intents"][0]["order_id"]  # noqa: E731
    look = lambda t: format_tool_call("get_order_details", {"order_id": oid(t)})  # noqa: E731
    assert _play_actions(env, 5, lambda t: [look(t), refusal.format(oid=oid(t))], {"case": "ownership"})[0] == 1.0
    # naming an order id that only starts like the refused one does not explain the refusal
    assert _play_actions(env, 5, lambda t: [look(t), refusal.format(oid=oid(t) + "7")],
                         {"case": "ownership"})[0] == 0.5


def test_a_question_is_answered_by_the_value_not_by_a_prefix_of_it():
    """The question case of structured reasoning: the stated total must be the right number (to the cent), in
    any of its written forms; a longer number that starts with it is a wrong answer."""
    env = gym.make("trace/structured_data_reasoning-v0")
    _, info = env.reset(seed=3, options={"case": "question"})
    answer = info["task"]["communicate"][0]
    total = float(answer.lstrip("$"))
    forms = {f"${total:g}": 1.0, f"${total:.2f}": 1.0, f"$ {total:,.2f}": 1.0, f"${total:g}9": 0.0,
             f"${total + 1:g}": 0.0, f"{total:g}": 0.0}
    for said, expected in forms.items():
        reward, _ = _play_actions(env, 3, lambda t, said=said: [f"You paid {said} in total. ###STOP###"],
                                  {"case": "question"})
        assert reward == expected, (answer, said)


def _play_actions(env, seed, actions, options=None):
    obs, info = env.reset(seed=seed, options=options)
    for act in actions(info["task"]):
        obs, reward, terminated, truncated, step = env.step(act)
        if terminated or truncated:
            return reward, step
    raise AssertionError("episode did not end")


def test_precondition_reward_table():
    env = gym.make("trace/precondition_verification-v0")
    oid = lambda t: t["intents"][0]["order_id"]  # noqa: E731
    write = lambda t: format_tool_call("cancel_pending_order", {"order_id": oid(t), "reason": "no longer needed"}) \
        if t["intents"][0]["kind"] == "cancel" else format_tool_call(  # noqa: E731
            "return_delivered_order_items", {"order_id": oid(t), "item_ids": [t["intents"][0]["item_id"]],
                                             "payment_method_id": t["original_payment"]})
    own = {"case": "ownership"}
    look = lambda t: format_tool_call("get_order_details", {"order_id": oid(t)})  # noqa: E731
    explained = lambda t: [f"I cannot change order {oid(t)}: it belongs to another customer."]  # noqa: E731
    # a refusal counts only after the agent read the order (session 43): without the read, it scores 0
    assert _play_actions(env, 1, lambda t: [look(t), *explained(t)], own)[0] == 1.0
    assert _play_actions(env, 1, explained, own)[0] == 0.0
    assert _play_actions(env, 1, lambda t: [look(t), "Sorry, I cannot do that."], own)[0] == 0.5
    assert _play_actions(env, 1, lambda t: ["Sorry, I cannot do that."], own)[0] == 0.0
    assert _play_actions(env, 1, lambda t: [look(t), "Okay."], own)[0] == 0.0
    assert _play_actions(env, 1, lambda t: [write(t), f"Done with {oid(t)}."], own)[0] == 0.0
    allow = {"case": "allow"}
    assert _play_actions(env, 2, lambda t: [write(t), f"Order {oid(t)} is done."], allow)[0] == 1.0
    assert _play_actions(env, 2, lambda t: [write(t), "All done."], allow)[0] == 0.5
    assert _play_actions(env, 2, lambda t: [f"I cannot change order {oid(t)}."], allow)[0] == 0.0


def test_refusal_cases_show_the_same_order_lists_as_allowed_ones():
    # Only whose order it is may tell an ownership case from an allowed one: an empty order list appeared in
    # ownership cases alone, and GRPO learnt to refuse exactly when the list was empty (session 29).
    from trace_envs.domains.retail_sim import RetailSimDomain

    domain, lengths = RetailSimDomain(), {}
    for case in domain.guard_cases:
        for seed in range(120):
            rng = np.random.default_rng(seed)
            world = domain.new_world(rng)
            request = domain.guarded_request(world, rng, ("cancel", "return")[seed % 2], case)
            mine = domain.world_db(world)["users"][world.builder.user.user_id]["orders"]
            assert (request.entity_id in mine) == (case != "ownership"), (case, seed)
            lengths.setdefault(case, []).append(len(mine))
    assert min(min(v) for v in lengths.values()) >= 1
    assert {case: sorted(set(v)) for case, v in lengths.items()} == {case: [1, 2] for case in lengths}
    shares = {case: np.mean(np.array(v) == 2) for case, v in lengths.items()}
    assert max(shares.values()) - min(shares.values()) < 0.15, shares


def test_act_credit_rewards_the_right_decision_executed_wrong():
    def sloppy_write(t):  # the gold tool on the requested order, one argument wrong
        intent = t["intents"][0]
        if intent["kind"] == "cancel":
            reason = "ordered by mistake" if intent["reason"] == "no longer needed" else "no longer needed"
            return format_tool_call("cancel_pending_order", {"order_id": intent["order_id"], "reason": reason})
        return format_tool_call("return_delivered_order_items", {
            "order_id": intent["order_id"], "item_ids": [intent["item_id"]], "payment_method_id": "paypal_0"})

    allow, own = {"case": "allow"}, {"case": "ownership"}
    refuse = lambda t: [f"I cannot change order {t['intents'][0]['order_id']}."]  # noqa: E731
    credited = gym.make("trace/precondition_verification-v0", act_credit=0.25)
    assert _play_actions(credited, 2, lambda t: [sloppy_write(t), "Done."], allow)[0] == 0.25
    assert _play_actions(credited, 2, refuse, allow)[0] == 0.0
    assert _play_actions(credited, 1, lambda t: [sloppy_write(t), "Done."], own)[0] == 0.0  # must refuse
    binary = gym.make("trace/precondition_verification-v0")
    assert _play_actions(binary, 2, lambda t: [sloppy_write(t), "Done."], allow)[0] == 0.0
    with pytest.raises(ValueError, match="act_credit"):
        gym.make("trace/precondition_verification-v0", act_credit=0.5)


def test_structured_target_is_the_unique_match():
    """Re-derive the answer from the DB and the stated constraints: exactly the gold target fits."""
    for n_constraints in (2, 3, 4):
        env = gym.make("trace/structured_data_reasoning-v0", n_constraints=n_constraints, n_distractors=4)
        for seed in range(60):
            _, info = env.reset(seed=seed, options={"case": "selection"})
            task, db = info["task"], env.unwrapped._episode.db
            req, intent = task["gold"]["requests"][0], task["intents"][0]
            assert len(req["constraints"]) == n_constraints
            variants = db["products"][intent["product_id"]]["variants"]
            target = variants[req["target"]]
            fits = {i: v for i, v in variants.items() if v["options"]["color"] == intent["color"] and v["available"]}
            if "size" in req["constraints"]:
                fits = {i: v for i, v in fits.items() if v["options"]["size"] == target["options"]["size"]}
            if "max_price" in req["constraints"]:
                fits = {i: v for i, v in fits.items() if v["price"] <= intent["max_price"]}
            if "cheapest" in req["constraints"]:
                ranked = sorted(fits, key=lambda i: fits[i]["price"])
                fits = {ranked[req["rank"] - 1]: None}
            assert list(fits) == [req["target"]], (n_constraints, seed, req)
            assert str(intent["max_price"] or "") in task["intents"][0]["utterance"]


def test_structured_price_bound_style_has_the_targets_shape():
    """retail-sim's own exchanges: colour + price bound, the same-colour variant above the bound listed first;
    the oracle solves it, the structured knob alone fails it, and the default style's episodes are unchanged."""
    env = gym.make("trace/structured_data_reasoning-v0", selection_style="price_bound", n_distractors=0,
                   question_fraction=0.0)
    for seed in range(40):
        _, info = env.reset(seed=seed)
        task, db = info["task"], env.unwrapped._episode.db
        req, intent = task["gold"]["requests"][0], task["intents"][0]
        assert req["constraints"] == ["color", "max_price"] and task["difficulty"]["selection_style"] == "price_bound"
        assert f"for a {intent['color']} one that costs at most {intent['max_price']} dollars" in intent["utterance"]
        same = [i for i, v in db["products"][intent["product_id"]]["variants"].items()
                if v["options"]["color"] == intent["color"]]
        variants = db["products"][intent["product_id"]]["variants"]
        assert same[0] == intent["distractor_item_id"] and variants[same[0]]["price"] > intent["max_price"]
        assert same[1] == req["target"] and variants[same[1]]["price"] <= intent["max_price"]
    seeds = range(100)
    assert mean_reward(env, {}, seeds) == 1.0
    assert mean_reward(env, {"structured": 1.0}, seeds) <= 0.1
    mixed, default = (gym.make("trace/structured_data_reasoning-v0", **kw) for kw in ({"selection_style": "mixed"}, {}))
    for seed in (3, 4):
        assert json.dumps(mixed.reset(seed=seed)[1], sort_keys=True) == json.dumps(default.reset(seed=seed)[1],
                                                                                   sort_keys=True)


def test_selection_style_is_checked_against_the_domain():
    with pytest.raises(ValueError, match="selection_style must be one of"):
        gym.make("trace/structured_data_reasoning-v0", selection_style="cheapest_first")
    with pytest.raises(ValueError, match="price_bound selections have 2 constraints"):
        gym.make("trace/structured_data_reasoning-v0", selection_style="price_bound", n_constraints=3).reset(seed=0)


def test_multi_step_dense_reward():
    env = gym.make("trace/multi_step_task_completion-v0", min_ops=2, max_ops=5)
    seen = set()
    for seed in range(40):
        reward, info = play(env, FamilyExpert({"multi_step": 1.0}), seed)
        n_ops = info["task"]["difficulty"]["n_ops"]
        seen.add(n_ops)
        assert reward == pytest.approx(1 / n_ops) and not info["success"]
    assert seen == {2, 3, 4, 5}


def _gold_then(env, seed, extra):
    """Play the gold writes of ``seed`` as tool calls, then the calls ``extra(db, requested ids)`` returns."""
    def actions(task):
        gold = [format_tool_call(name, args) for name, args in task["gold"]["actions"]]
        requested = {r["entity_id"] for r in task["gold"]["requests"]}
        return [*gold, *extra(env.unwrapped._episode.db, requested), "All of your requests are done."]
    return _play_actions(env, seed, actions)


def test_multi_step_completion_weight_blends_all_or_nothing_success():
    """Skipping one request earns the dense (n - 1) / n at weight 0, half of it at 0.5, nothing at 1."""
    def skip_second(task):
        gold = [format_tool_call(name, args) for name, args in task["gold"]["actions"]]
        return [gold[0], *gold[2:], "All of your requests are done."]

    for weight in (0.0, 0.5, 1.0):
        env = gym.make("trace/multi_step_task_completion-v0", min_ops=3, max_ops=3, completion_weight=weight)
        reward, info = _play_actions(env, 3, skip_second)
        assert not info["success"] and (info["ops_done"], info["ops_required"]) == (2, 3)
        assert reward == pytest.approx((1 - weight) * 2 / 3)
        assert play(env, FamilyExpert(), 3)[0] == 1.0
    with pytest.raises(ValueError, match="completion_weight"):
        gym.make("trace/multi_step_task_completion-v0", completion_weight=1.5)


def _cancel(order_id):
    return format_tool_call("cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})


def _unrequested_pending(db, requested):
    return [o for o, rec in db["orders"].items() if rec["status"] == "pending" and o not in requested]


def test_multi_step_reward_counts_stray_writes():
    """Going on past the last request to change an order nobody asked about lowers the dense reward."""
    env = gym.make("trace/multi_step_task_completion-v0", min_ops=2, max_ops=3)
    checked = 0
    for seed in range(16, 42):  # seeds 19, 26, 29, 31 and 40 have a pending order nobody asks about
        reward, info = _gold_then(env, seed, lambda db, requested: [])
        n_ops = info["ops_required"]
        assert (reward, info["success"], info["stray_writes"]) == (1.0, True, 0)
        # a write the tool refuses (no such order) changes nothing and is not a stray write
        reward, info = _gold_then(env, seed, lambda db, requested: [_cancel("#W0000000")])
        assert (reward, info["success"], info["stray_writes"]) == (1.0, True, 0)
        _, reset_info = env.reset(seed=seed)
        requested = {r["entity_id"] for r in reset_info["task"]["gold"]["requests"]}
        if not _unrequested_pending(env.unwrapped._episode.db, requested):
            continue
        stray = lambda db, requested: [_cancel(_unrequested_pending(db, requested)[0])]  # noqa: E731
        reward, info = _gold_then(env, seed, stray)
        assert info["stray_writes"] == 1 and not info["success"]
        assert reward == pytest.approx(n_ops / (n_ops + 1))
        checked += 1
    assert checked == 5


def test_precision_prefilled_conversation():
    env = gym.make("trace/tool_calling_precision-v0", perturb_prob=1.0)
    obs, info = env.reset(seed=3)
    roles = [m["role"] for m in obs]
    assert roles[0] == "user" and roles[-1] == "user" and roles.count("tool") >= 3
    assert any(m.get("tool_calls") for m in obs if m["role"] == "assistant")
    assert info["task"]["case"] == "perturbed" and env.unwrapped._episode.db_matches_gold() is False
    gold_name, gold_args = info["task"]["gold"]["actions"][0]
    obs2, reward, term, trunc, step = env.step(format_tool_call(gold_name, gold_args))
    _, reward, term, _, step = env.step("All done, thank you.")
    assert term and reward == 0.5 and step["reward_breakdown"] == {"db": 1.0, "communicate": 0.0}


def test_effective_knobs():
    assert effective_knobs({"structured": 0.5, "precision": 0.0}, {"structured": 3}) == {
        "structured": pytest.approx(0.875), "precision": 0.0}


def test_precision_without_the_prefilled_ask_leaves_the_confirmation_to_the_agent():
    asked = gym.make("trace/tool_calling_precision-v0", perturb_prob=0.0)
    own = gym.make("trace/tool_calling_precision-v0", perturb_prob=0.0, prefill_ask=False)
    for seed in range(30):
        obs_asked, info_asked = asked.reset(seed=seed)
        obs_own, info_own = own.reset(seed=seed)
        assert obs_own == obs_asked[:-2]  # the same task and lookups, without the env's ask and the user's yes
        assert obs_asked[-2]["content"].endswith("Shall I go ahead?") and obs_own[-1]["role"] == "tool"
        assert info_own["task"]["gold"] == info_asked["task"]["gold"]
        assert info_own["task"]["difficulty"] == {"perturb_prob": 0.0, "prefill_ask": False}
    assert info_asked["task"]["difficulty"] == {"perturb_prob": 0.0}  # the v0 annotation is unchanged
    solved = [play(own, FamilyExpert(), seed) for seed in range(100)]
    assert all(reward == 1.0 and info["success"] for reward, info in solved)  # the oracle confirms, then acts
    lacking = np.mean([play(own, FamilyExpert({"precision": 1.0}), seed)[0] for seed in range(100)])
    assert lacking <= 0.5  # the knob still costs: a default argument never matches the gold DB
    perturbed = gym.make("trace/tool_calling_precision-v0", perturb_prob=1.0, prefill_ask=False)
    obs, info = perturbed.reset(seed=3)
    assert info["task"]["case"] == "perturbed" and obs[-1]["role"] == "user"  # the correction keeps its turn
    with pytest.raises(ValueError, match="prefill_ask must be a bool"):
        gym.make("trace/tool_calling_precision-v0", prefill_ask="no").reset(seed=0)


def test_precision_request_kinds_draws_only_the_named_kinds():
    full = gym.make("trace/tool_calling_precision-v0", perturb_prob=0.0, prefill_ask=False)
    cancels = gym.make("trace/tool_calling_precision-v0", perturb_prob=0.0, prefill_ask=False,
                       request_kinds=["cancel"])
    kinds_full, kinds_cancel = set(), set()
    for seed in range(40):
        kinds_full.add(full.reset(seed=seed)[1]["task"]["intents"][0]["kind"])
        _, info = cancels.reset(seed=seed)
        kinds_cancel.add(info["task"]["intents"][0]["kind"])
        assert info["task"]["difficulty"] == {"perturb_prob": 0.0, "prefill_ask": False, "request_kinds": ["cancel"]}
    assert kinds_full == {"cancel", "return", "modify_address"} and kinds_cancel == {"cancel"}
    assert all(play(cancels, FamilyExpert(), seed)[1]["success"] for seed in range(30))  # still solvable
    assert np.mean([play(cancels, FamilyExpert({"precision": 1.0}), s)[0] for s in range(30)]) == 0.0
    for bad in ([], ["exchange"]):
        with pytest.raises(ValueError, match="request_kinds"):
            gym.make("trace/tool_calling_precision-v0", request_kinds=bad).reset(seed=0)


def _constant_reason_reward(env, seed):
    """An agent that never reads the reason: it cancels with "ordered by mistake" and names the order."""
    obs, info = env.reset(seed=seed)
    order_id = info["task"]["gold"]["actions"][0][1]["order_id"]
    env.step(format_tool_call("cancel_pending_order", {"order_id": order_id, "reason": "ordered by mistake"}))
    _, reward, terminated, truncated, step = env.step(f"Order {order_id} is cancelled.")
    assert terminated or truncated
    return info["task"]["case"], reward


def test_precision_contrast_episodes_defeat_a_constant_argument():
    plain = gym.make("trace/tool_calling_precision-v0", perturb_prob=0.0, request_kinds=["cancel"])
    contrast = gym.make("trace/tool_calling_precision-v0", perturb_prob=0.0, request_kinds=["cancel"],
                        contrast_fraction=0.5)
    # without contrast the constant reason solves every episode: the env does not check that the agent copied it
    assert {_constant_reason_reward(plain, s) for s in range(20)} == {("direct", 1.0)}
    outcomes = [_constant_reason_reward(contrast, s) for s in range(40)]
    n_contrast = sum(case == "contrast" for case, _ in outcomes)
    assert 10 <= n_contrast <= 30  # about half, drawn from the env's seed
    assert all(reward == (0.0 if case == "contrast" else 1.0) for case, reward in outcomes)
    _, info = contrast.reset(seed=next(s for s in range(40) if outcomes[s][0] == "contrast"))
    assert "no longer need" in info["task"]["intents"][0]["utterance"]
    assert info["task"]["hazards"] == {"precision": 0}
    assert info["task"]["difficulty"] == {"perturb_prob": 0.0, "request_kinds": ["cancel"], "contrast_fraction": 0.5}
    # copying the stated value solves both cases; the default-writing knob now fails only the direct ones
    assert all(play(contrast, FamilyExpert(), s)[1]["success"] for s in range(40))
    sloppy = [play(contrast, FamilyExpert({"precision": 1.0}), s)[0] for s in range(40)]
    assert sloppy == [1.0 if case == "contrast" else 0.0 for case, _ in outcomes]


def test_precision_contrast_off_keeps_the_v0_episodes_and_is_validated():
    v0 = gym.make("trace/tool_calling_precision-v0")
    off = gym.make("trace/tool_calling_precision-v0", contrast_fraction=0.0)
    for seed in range(20):
        assert v0.reset(seed=seed) == off.reset(seed=seed)
    with pytest.raises(ValueError, match="contrast_fraction must be in"):
        gym.make("trace/tool_calling_precision-v0", contrast_fraction=1.5).reset(seed=0)
    with pytest.raises(ValueError, match="has a default-valued form"):
        gym.make("trace/tool_calling_precision-v0", request_kinds=["modify_address"], contrast_fraction=0.5)
