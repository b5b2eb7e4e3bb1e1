"""The auxiliary decision probe: decision points of expert episodes, the head's loss, the bootstrap path."""

import json

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


def test_decision_points_sit_before_the_turn_that_acts_or_refuses(tmp_path):
    cfg = BootstrapConfig(**{**TINY, "max_len": 4096}, knobs=ORACLE, decision_loss_weight=1.0)  # no truncation
    runner = bc.Bootstrapper(BootstrapConfig(**{**TINY, "steps": 1}), tmp_path)
    runner.run(progress=False)
    _, tokenizer = load_policy(runner.model_dir)
    renderer = ChatRenderer(tokenizer)
    seen = {"allow": 0, "ownership": 0, "status": 0}
    for record in expert_episodes(cfg, list(range(1_000_000, 1_000_040))):
        example = encode(renderer, record, cfg, with_decisions=True)
        intents = record.info["task"]["intents"]
        writes = [i for i in intents if i["kind"] != "question"]
        assert len(example.decisions) == len(writes)  # the oracle looks up every request's order
        for point, intent in zip(example.decisions, writes):
            assert point.must_refuse == (not intent["eligible"])
            assert point.case == ("allow" if intent["eligible"] else intent["ineligible_reason"])
            first = tokenizer.decode([example.ids[point.position + 1]])
            assert example.loss_mask[point.position + 1] == 1 and example.loss_mask[point.position] == 0
            if point.must_refuse:
                assert first != "Please"  # the oracle never asks to confirm a write it must refuse
            elif intent["kind"] in ("cancel", "return"):
                assert first == "Please"
            seen[point.case] += 1
    assert min(seen.values()) > 0, seen


def test_decision_head_loss_is_binary_cross_entropy_at_the_points():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 8)
    head = DecisionHead(8)
    points = [[DecisionPoint(1, True, "ownership")],
              [DecisionPoint(3, False, "allow"), DecisionPoint(4, True, "status")]]
    rows, cols, labels = decision_index(points)
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
