"""The focus batch: a second batch per BC step of episodes the target's mix rarely shows (e.g. gift-card refunds),
played with their own env kwargs and knobs, from their own seeds, its loss added at its weight."""

import json

import pytest
import torch

from trace_envs.retail_sim.env import RetailSimEnv
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.config import BootstrapConfig, FocusConfig
from trace_train.bootstrap.data import batch_seeds, batches, expert_episodes, focus_config, focus_seeds
from trace_train.model import ChatRenderer, load_policy

TINY = dict(steps=3, batch_size=2, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=4, warmup_steps=1,
            lr=3e-3, max_len=1024)
RETURNS = {"n_intents": 1, "kinds": ["return"], "gift_card_rate": 1.0}


def _intents(env: RetailSimEnv, seeds) -> list[dict]:
    return [i for s in seeds for i in env.reset(seed=s)[1]["task"]["intents"]]


def test_the_gift_card_rate_sets_the_share_of_eligible_returns_asking_for_it_and_keeps_the_requested_order():
    seeds = range(200)
    by_rate = {r: _intents(RetailSimEnv(n_intents=1, kinds=["return"], gift_card_rate=r), seeds)
               for r in (0.0, 0.5, 1.0)}
    eligible = [i["eligible"] for i in by_rate[0.5]]
    for intents in by_rate.values():
        # a one-return task keeps its requested order, item and eligibility at every rate (the draws after the
        # rate's decision, e.g. the gift card's balance, can move: see scenario.generate_scenario)
        assert [(i["order_id"], i["item_id"], i["eligible"]) for i in intents] == \
            [(i["order_id"], i["item_id"], i["eligible"]) for i in by_rate[0.5]]
        asks = [i["refund_to_gift_card"] for i in intents]
        assert not any(a and not e for a, e in zip(asks, eligible))
    assert not any(i["refund_to_gift_card"] for i in by_rate[0.0])
    assert all(i["refund_to_gift_card"] == i["eligible"] for i in by_rate[1.0])
    half = sum(i["refund_to_gift_card"] for i in by_rate[0.5]) / sum(eligible)
    assert 0.35 < half < 0.65
    assert _intents(RetailSimEnv(), range(20)) == _intents(RetailSimEnv(gift_card_rate=0.5), range(20))
    with pytest.raises(ValueError, match="gift_card_rate"):
        RetailSimEnv(gift_card_rate=1.5)


def test_focus_is_validated_and_enters_the_hash_only_when_set():
    plain = BootstrapConfig(**TINY)
    assert BootstrapConfig(**TINY, focus=None).content_hash() == plain.content_hash()
    focused = BootstrapConfig.from_dict({**TINY, "focus": {"env_kwargs": RETURNS, "knobs": {"precision": 0.6}}})
    assert isinstance(focused.focus, FocusConfig) and focused.content_hash() != plain.content_hash()
    other = BootstrapConfig.from_dict({**TINY, "focus": {"env_kwargs": RETURNS, "knobs": {"precision": 0.7}}})
    assert other.content_hash() != focused.content_hash()
    with pytest.raises(ValueError, match="unknown knob"):
        FocusConfig(knobs={"precisoin": 0.6})
    with pytest.raises(ValueError, match="batch_size"):
        FocusConfig(batch_size=0)
    with pytest.raises(Exception, match="focus"):
        BootstrapConfig.from_dict({**TINY, "focus": {"env_kwarg": RETURNS}})


def test_focus_batches_play_their_own_kwargs_knobs_and_seeds(tmp_path):
    cfg = BootstrapConfig(**TINY, focus=FocusConfig(env_kwargs=RETURNS, knobs={"precision": 0.0}, batch_size=3))
    fcfg = focus_config(cfg)
    assert fcfg.env_kwargs == RETURNS and fcfg.knobs.precision == 0.0 and fcfg.focus is None
    assert fcfg.knobs.precondition == cfg.knobs.precondition and fcfg.batch_size == 3
    seeds = [focus_seeds(cfg, step) for step in range(3)]
    assert len({s for step in seeds for s in step}) == 9  # fresh seeds every step ...
    assert not set(seeds[0]) & {s for step in range(100) for s in batch_seeds(cfg, step)}  # ... not the BC stream's
    runner = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path)
    runner.run(progress=False)
    _, tokenizer = load_policy(runner.model_dir)
    step, examples, (focused,) = next(batches(cfg, ChatRenderer(tokenizer), 1))
    assert step == 1 and len(examples) == 2 and len(focused) == 3
    assert [e.seed for e in focused] == focus_seeds(cfg, 1)
    # the focus expert's knobs: precision 0 refunds every asked-for return to the gift card, precision 1 none
    sloppy = focus_config(BootstrapConfig(**TINY, focus=FocusConfig(env_kwargs=RETURNS, knobs={"precision": 1.0})))
    asked = {True: [], False: []}
    for precise, c in ((True, fcfg), (False, sloppy)):
        for record in expert_episodes(c, focus_seeds(cfg, 0) + focus_seeds(cfg, 1) + focus_seeds(cfg, 2)):
            (intent,) = record.info["task"]["intents"]
            assert intent["kind"] == "return"
            refunds = [json.loads(call["function"]["arguments"])["payment_method_id"]
                       for m in record.messages for call in m.get("tool_calls") or []
                       if call["function"]["name"] == "return_delivered_order_items"]
            if intent["refund_to_gift_card"] and refunds:
                asked[precise].append(refunds[0] == record.info["task"]["gift_card"])
    assert asked[True] and all(asked[True]) and asked[False] and not any(asked[False])
    assert next(batches(BootstrapConfig(**TINY), ChatRenderer(tokenizer), 0))[2] == []


def test_a_focused_stage_adds_the_focus_loss_at_its_weight(tmp_path, monkeypatch):
    calls = []
    original = bc.batch_loss

    def spy(model, head, examples, cfg, pad_id, readouts=None):
        terms = original(model, head, examples, cfg, pad_id, readouts)
        calls.append((len(examples), terms.total.item()))
        return terms

    monkeypatch.setattr(bc, "batch_loss", spy)
    cfg = BootstrapConfig(**TINY, focus=FocusConfig(env_kwargs=RETURNS, batch_size=3, weight=0.5))
    seen = []
    real_backward = torch.Tensor.backward

    def record_backward(self, *a, **k):
        seen.append(self.item())
        return real_backward(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "backward", record_backward)
    bc.Bootstrapper(cfg, tmp_path).run(progress=False)
    assert [n for n, _ in calls[:2]] == [2, 3]  # the BC batch, then the focus batch, every step
    assert len(seen) == cfg.steps
    for step in range(cfg.steps):
        (_, main), (_, focus) = calls[2 * step: 2 * step + 2]
        assert seen[step] == pytest.approx(main + 0.5 * focus, rel=1e-6)


def test_the_shipped_chain_carries_the_gift_card_focus_in_stages_four_and_five_only():
    from omegaconf import OmegaConf

    def load(name):
        return OmegaConf.to_container(OmegaConf.load(f"conf/bootstrap/{name}.yaml"), resolve=True)

    shipped, hints, stage3 = load("default"), load("with_hints"), load("stage3")
    for stage in (shipped, shipped["init_from"], hints):
        cfg = FocusConfig(**stage["focus"])
        # single returns whose user asks for the gift card, cloned at precision knob 0.6, one batch per step
        assert cfg.weight == 1.0 and cfg.env_kwargs == RETURNS and cfg.knobs == {"precision": 0.6}
        assert cfg.batch_size == stage["batch_size"]
    # stage 4 of the chain is the hints stage, focus and all; stages 1-3 never saw the focus
    with_focus = BootstrapConfig.from_dict(shipped)
    assert with_focus.parent.content_hash() == BootstrapConfig.from_dict(hints).content_hash()
    assert with_focus.parent.parent.content_hash() == BootstrapConfig.from_dict(stage3).content_hash()
    stage = with_focus.parent.parent
    while stage is not None:
        assert stage.focus is None
        stage = stage.parent
    without = {k: v for k, v in shipped.items() if k != "focus"}
    without["init_from"] = {k: v for k, v in shipped["init_from"].items() if k != "focus"}
    assert with_focus.content_hash() != BootstrapConfig.from_dict(without).content_hash()
