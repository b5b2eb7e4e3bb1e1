"""The auxiliary decision probe: decision points of expert episodes, the head's loss, the bootstrap path."""

import json

import pytest
import torch

from trace_envs.retail_sim import ExpertKnobs
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.config import BootstrapConfig, KnobsConfig
from trace_train.bootstrap.data import encode, expert_episodes
from trace_train.bootstrap.decisions import DecisionHead, DecisionPoint, decision_index
from trace_train.model import ChatRenderer, load_policy

TINY = dict(steps=4, batch_size=2, tokenizer_episodes=40, probe_episodes=6, checkpoint_every=4, warmup_steps=1,
            lr=3e-3, max_len=1024)
ORACLE = KnobsConfig(**vars(ExpertKnobs()))
ALLOWED_STATUS = {"cancel": "pending", "modify_items": "pending", "modify_address": "pending", "return": "delivered",
                  "exchange": "delivered"}


def test_decision_points_sit_before_the_turn_that_acts_or_refuses(tmp_path):
    cfg = BootstrapConfig(**{**TINY, "max_len": 4096}, knobs=ORACLE, decision_loss_weight=1.0)  # no truncation
    runner = bc.Bootstrapper(BootstrapConfig(**{**TINY, "steps": 1}), tmp_path)
    runner.run(progress=False)
    _, tokenizer = load_policy(runner.model_dir)
    renderer = ChatRenderer(tokenizer)
    seen, listings = {"allow": 0, "ownership": 0, "status": 0}, set()
    for record in expert_episodes(cfg, list(range(1_000_000, 1_000_040))):
        example = encode(renderer, record, cfg, with_decisions=True)
        intents = record.info["task"]["intents"]
        writes = [i for i in intents if i["kind"] != "question"]
        assert len(example.decisions) == len(writes)  # the oracle looks up every request's order
        for point, intent in zip(example.decisions, writes):
            assert point.label == (not intent["eligible"]) and point.decision == "precondition"
            assert point.case == ("allow" if intent["eligible"] else intent["ineligible_reason"])
            kind, status, listing = point.detail.split("/")  # status and profile read from the tool results
            assert kind == intent["kind"] and point.group == f"{point.case}/{kind}/{status}/{listing}"
            profile = next(json.loads(m["content"]) for m in record.messages if m.get("name") == "get_user_details")
            if point.case == "ownership":  # another customer's order is never in the user's profile
                assert listing == ("unlisted" if profile["orders"] else "no-orders")
            else:
                assert listing == "listed" and intent["order_id"] in profile["orders"]
            listings.add(listing)
            if point.case in ("allow", "status"):  # allowed exactly on the kind's one allowed status
                assert (status == ALLOWED_STATUS[kind]) == (point.case == "allow"), (point.case, kind, status)
            first = tokenizer.decode([example.ids[point.position + 1]])
            assert example.loss_mask[point.position + 1] == 1 and example.loss_mask[point.position] == 0
            if point.label:
                assert first != "Please"  # the oracle never asks to confirm a write it must refuse
            elif intent["kind"] in ("cancel", "return"):
                assert first == "Please"
            seen[point.case] += 1
    assert min(seen.values()) > 0 and listings == {"listed", "unlisted", "no-orders"}, (seen, listings)


def test_decision_head_loss_is_binary_cross_entropy_at_the_points():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 8)
    head = DecisionHead(8)
    points = [[DecisionPoint(1, True, "ownership")],
              [DecisionPoint(3, False, "allow"), DecisionPoint(4, True, "status")]]
    rows, cols, labels, columns = decision_index(points)
    assert columns.tolist() == [0, 0, 0]
    assert rows.tolist() == [0, 1, 1] and cols.tolist() == [1, 3, 4] and labels.tolist() == [1.0, 0.0, 1.0]
    logits = torch.stack([head.linear(hidden[0, 1]), head.linear(hidden[1, 3]), head.linear(hidden[1, 4])]).squeeze(-1)
    by_hand = -(labels * torch.log(torch.sigmoid(logits)) + (1 - labels) * torch.log(1 - torch.sigmoid(logits))).mean()
    assert torch.allclose(head.loss(hidden, rows, cols, labels), by_hand, atol=1e-6)
    empty = decision_index([[], []])
    assert head.loss(hidden, *empty).item() == 0.0


def test_bootstrap_with_the_decision_head_reports_it_and_saves_a_plain_policy(tmp_path):
    plain = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path)
    plain.run(progress=False)
    cfg = BootstrapConfig(**TINY, decision_loss_weight=1.0)
    assert cfg.content_hash() != plain.cfg.content_hash()
    runner = bc.Bootstrapper(cfg, tmp_path)
    summary = runner.run(progress=False)
    probe = summary["probe"]["decision_probe"]
    assert 0.0 <= probe["accuracy"] <= 1.0 and sum(probe["points_by_case"].values()) > 0
    assert "decision_probe" not in plain.run(progress=False)["probe"]
    rows = [json.loads(line) for line in (runner.dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["decision_loss"] >= 0 for r in rows)
    with_head, _ = load_policy(runner.model_dir)
    without, _ = load_policy(plain.model_dir)
    assert with_head.state_dict().keys() == without.state_dict().keys()  # the head is not part of the policy
    assert any(not torch.equal(a, b) for a, b in zip(with_head.state_dict().values(), without.state_dict().values()))


DECISIONS = ("precondition", "multi_step", "structured", "precision")


def _oracle_examples(tmp_path, n=60):
    cfg = BootstrapConfig(**{**TINY, "max_len": 4096}, knobs=ORACLE, decision_loss_weight=1.0, decisions=DECISIONS)
    runner = bc.Bootstrapper(BootstrapConfig(**{**TINY, "steps": 1}), tmp_path)
    runner.run(progress=False)
    _, tokenizer = load_policy(runner.model_dir)
    renderer = ChatRenderer(tokenizer)
    records = expert_episodes(cfg, list(range(1_000_000, 1_000_000 + n)))
    return tokenizer, [(r, encode(renderer, r, cfg, with_decisions=True)) for r in records]


def test_every_capability_has_its_decision_points_labelled_from_the_task(tmp_path):
    tokenizer, examples = _oracle_examples(tmp_path)
    seen = {}
    for record, example in examples:
        intents = record.info["task"]["intents"]
        by = {d: [p for p in example.decisions if p.decision == d] for d in DECISIONS}
        for p in by["multi_step"]:  # before a turn: the oracle continues exactly while requests are left
            turn = tokenizer.decode(example.ids[p.position + 1: p.position + 4], skip_special_tokens=False)
            assert example.loss_mask[p.position] == 0 and example.loss_mask[p.position + 1] == 1
            assert p.label == (p.case == "requests_left") == turn.startswith("<tool_call>")
        assert [p.label for p in by["multi_step"]] == [True] * (len(intents) - 1) + [False]
        swaps = [i for i in intents if i["kind"] in ("exchange", "modify_items") and i["eligible"]]
        cases = [p.case for p in by["structured"]]
        assert cases.count("target") == cases.count("distractor") == len(swaps)
        assert sum(p.label for p in by["structured"]) == len(swaps)
        for p in by["structured"]:  # inside the product listing, after the candidate's own id
            assert example.loss_mask[p.position] == 0
            if p.case != "other":
                wanted = {i["target_item_id"] if p.label else i["distractor_item_id"] for i in swaps}
                context = tokenizer.decode(example.ids[max(0, p.position - 40): p.position + 1])
                assert any(v in context for v in wanted)
        acts = [i for i in intents if i["kind"] in ("cancel", "return", "modify_address") and i["eligible"]]
        assert len(by["precision"]) == len(acts)
        for p, intent in zip(by["precision"], acts):
            exact = intent["kind"] == "modify_address" or intent["reason"] == "ordered by mistake" or \
                intent["refund_to_gift_card"]
            assert p.label == bool(exact) and p.group == f"{p.case}/{intent['kind']}"
        for p in example.decisions:
            seen[p.case] = seen.get(p.case, 0) + 1
    for case in ("requests_left", "none_left", "target", "distractor", "exact_value", "default_value", "allow",
                 "ownership"):
        assert seen.get(case, 0) > 0, (case, seen)


def test_an_expert_that_stops_early_is_labelled_as_leaving_requests(tmp_path):
    cfg = BootstrapConfig(**{**TINY, "max_len": 4096}, knobs=KnobsConfig(**{**vars(ORACLE), "multi_step": 1.0}),
                          decision_loss_weight=1.0, decisions=("multi_step",))
    runner = bc.Bootstrapper(BootstrapConfig(**{**TINY, "steps": 1}), tmp_path)
    runner.run(progress=False)
    _, tokenizer = load_policy(runner.model_dir)
    renderer = ChatRenderer(tokenizer)
    multi = 0
    for record in expert_episodes(cfg, list(range(1_000_000, 1_000_040))):
        points = encode(renderer, record, cfg, with_decisions=True).decisions
        n = len(record.info["task"]["intents"])
        assert [p.label for p in points] == [n > 1]  # it reports after the first request, left or not
        multi += n > 1
    assert multi > 0


def test_the_head_has_a_column_per_decision_and_weighs_decisions_equally():
    torch.manual_seed(0)
    hidden = torch.randn(1, 6, 8)
    head = DecisionHead(8, ("precondition", "multi_step"))
    points = [[DecisionPoint(1, True, "ownership"), DecisionPoint(2, False, "none_left", "multi_step"),
               DecisionPoint(3, True, "requests_left", "multi_step"), DecisionPoint(4, True, "requests_left",
                                                                                     "multi_step")]]
    rows, cols, labels, columns = decision_index(points, head.decisions)
    assert columns.tolist() == [0, 1, 1, 1]
    logits = head.linear(hidden[0, [1, 2, 3, 4]])
    picked = torch.stack([logits[0, 0], logits[1, 1], logits[2, 1], logits[3, 1]])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(picked, labels, reduction="none")
    by_hand = (bce[0] + bce[1:].mean()) / 2
    assert torch.allclose(head.loss(hidden, rows, cols, labels, columns), by_hand, atol=1e-6)
    with pytest.raises(ValueError, match="decisions"):
        DecisionHead(8, ("precondition", "telepathy"))


def test_the_decisions_key_keeps_old_hashes_and_changes_new_ones():
    old = BootstrapConfig(**TINY, decision_loss_weight=1.0)
    assert BootstrapConfig(**TINY, decision_loss_weight=1.0, decisions=("precondition",)).content_hash() == \
        old.content_hash()
    assert BootstrapConfig(**TINY, decision_loss_weight=1.0, decisions=DECISIONS).content_hash() != old.content_hash()
    assert BootstrapConfig.from_dict({**TINY, "decisions": list(DECISIONS)}).decisions == DECISIONS


def test_hinted_bc_episodes_are_the_configured_share_and_the_expert_follows_them():
    from trace_train.bootstrap.data import hinted_seed

    seeds = list(range(1_000_000, 1_000_400))
    assert abs(sum(hinted_seed(s, 0.3) for s in seeds) / len(seeds) - 0.3) < 0.06
    assert not any(hinted_seed(s, 0.0) for s in seeds)
    cfg = BootstrapConfig(**TINY, knobs=KnobsConfig(precondition=1.0, structured=1.0, multi_step=1.0, precision=1.0),
                          hint_fraction=0.5, hint_uptake=1.0)
    records = expert_episodes(cfg, seeds[:80])
    hinted = [r for r in records if "<expert_guidance>" in r.messages[0]["content"]]
    assert {r.seed for r in hinted} <= {s for s in seeds[:80] if hinted_seed(s, 0.5)}
    assert len(hinted) > 10
    plain = expert_episodes(cfg, seeds[:80], hints=False)
    assert not any("<expert_guidance>" in r.messages[0]["content"] for r in plain)
    # A fully lacking expert that follows every hint solves hinted tasks needing only the hinted capability.
    by_seed = {r.seed: r for r in plain}
    single = [r for r in hinted if len(r.info["task"]["required_capabilities"]) == 1]
    assert single
    for r in single:
        assert r.reward == 1.0 and by_seed[r.seed].reward == 0.0


def test_hint_keys_keep_old_hashes():
    base = BootstrapConfig(**TINY)
    assert BootstrapConfig(**TINY, hint_fraction=0.0, hint_uptake=0.0).content_hash() == base.content_hash()
    assert BootstrapConfig(**TINY, hint_fraction=0.3, hint_uptake=0.7).content_hash() != base.content_hash()
