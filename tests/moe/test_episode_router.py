"""The episode router (``moe.gate.scope: episode``): a learned top-1 route per episode from its first user message.

Real pieces throughout: the shipped retail-sim-tiny base, random non-zero peft adapters, seeded retail-sim
requests rendered by the policy's own chat renderer, and the ``composed`` policy built from a saved directory.
"""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest
import torch

from trace_moe import ComposedModel
from trace_moe.config import MoEConfig
from trace_moe.episode_router import (
    EpisodeRouter,
    EpisodeRouterConfig,
    composition_scope,
    fit_episode_router,
    request_features,
    summarize_routing,
    train_episode_router,
)
from trace_moe.gated_lora import GateConfig
from trace_moe.routers import first_user_message
from trace_moe.routing_trace import route_record
from trace_train.model import load_policy
from trace_train.model.rendering import ChatRenderer
from trace_train.paths import shipped_checkpoint
from trace_train.policies import PolicySpec, build_backend
from trace_train.rollout.base import group_requests
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.task_routed import TaskRoutedRolloutBackend

from .moe_helpers import make_adapter

ENV = "trace/retail-sim-v0"
NAMES = ["by_email", "by_name"]


def _requests(seeds) -> list[str]:
    import trace_envs  # noqa: F401  (registers the envs)

    env = gym.make(ENV)
    try:
        return [first_user_message(list(env.reset(seed=s)[0])) for s in seeds]
    finally:
        env.close()


def _label(text: str) -> int:
    """A lexical property of the request the router must read: how the user identifies (slot 1: by email)."""
    return 1 if "email" in text.lower() else 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("episode_router")
    base = shipped_checkpoint()
    adapters = [make_adapter(base, root / name, seed=300 + i) for i, name in enumerate(NAMES)]
    model, tokenizer = load_policy(base)
    composed = ComposedModel.from_pretrained(base, adapters, GateConfig(scope="episode"), adapter_names=NAMES)
    encode = ChatRenderer(tokenizer).request_ids
    texts = _requests(range(0, 120))
    return root, base, composed, encode, texts


def test_the_fit_separates_slots_leaves_unseen_slots_out_and_is_deterministic():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 8, generator=gen)
    labels = [1 if v > 0 else 3 for v in x[:, 2].tolist()]  # slot 3 and slot 1 by one feature's sign
    names = ["base", "a", "b", "c"]
    router = fit_episode_router(x, labels, names, EpisodeRouterConfig(weight_decay=1e-3))
    logits = router.logits(x)
    assert math.isinf(float(logits[0, 0])) and math.isinf(float(logits[0, 2]))  # base and "b" had no example
    assert [d.slot for d in router.decide(x)] == labels
    again = fit_episode_router(x, labels, names, EpisodeRouterConfig(weight_decay=1e-3))
    assert torch.equal(again.weight, router.weight) and torch.equal(again.bias, router.bias)
    summary = summarize_routing(router, x, labels)
    assert summary.episode_accuracy == 1.0 and summary.load[0] == 0.0
    assert sum(map(sum, summary.confusion)) == 60
    with pytest.raises(ValueError, match="slot indices"):
        fit_episode_router(x, [4] * 60, names, EpisodeRouterConfig())
    with pytest.raises(ValueError, match="labels"):
        fit_episode_router(x, labels[:10], names, EpisodeRouterConfig())


def test_soft_targets_fit_each_requests_distribution_and_one_hot_rows_equal_labels():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(80, 6, generator=gen)
    side = x[:, 0] > 0
    x[:, 0] += 3 * torch.where(side, 1.0, -1.0)  # two clusters of requests
    # two slots share each request's reward (the paper's warm start); the one with more of it should win
    targets = torch.where(side[:, None], torch.tensor([0.0, 0.7, 0.3, 0.0]), torch.tensor([0.0, 0.2, 0.8, 0.0]))
    names = ["base", "a", "b", "c"]
    router = fit_episode_router(x, targets, names, EpisodeRouterConfig(weight_decay=1e-3))
    assert [d.slot for d in router.decide(x)] == [1 if s else 2 for s in side.tolist()]
    logits = router.logits(x)
    assert math.isinf(float(logits[0, 0])) and math.isinf(float(logits[0, 3]))  # no mass on base or "c"
    probs = torch.softmax(logits[:, 1:3], dim=-1)
    assert float((probs[side, 0] - 0.7).abs().mean()) < 0.15  # it fits the shares, not just their argmax
    labels = [1 if s else 2 for s in side.tolist()]
    hard = fit_episode_router(x, labels, names, EpisodeRouterConfig(weight_decay=1e-3))
    one_hot = fit_episode_router(x, torch.nn.functional.one_hot(torch.tensor(labels), 4).float(), names,
                                 EpisodeRouterConfig(weight_decay=1e-3))
    assert torch.allclose(hard.weight, one_hot.weight) and torch.equal(hard.bias.isinf(), one_hot.bias.isinf())
    for bad in (targets[:10], targets * 2, targets[:, :3], targets - 0.5):
        with pytest.raises(ValueError, match="distributions"):
            fit_episode_router(x, bad, names, EpisodeRouterConfig())


def test_the_router_reads_the_request_from_the_frozen_base(setup):
    _, _, composed, encode, texts = setup
    train, held = texts[:80], texts[80:]
    labels = [_label(t) for t in train]
    assert 10 < labels.count(1) < 70  # both kinds of request occur, so accuracy can tell
    before = [p.detach().clone() for p in composed.model.parameters()]
    router = train_episode_router(composed, [encode(t) for t in train], labels, EpisodeRouterConfig())
    assert all(torch.equal(a, b) for a, b in zip(before, composed.model.parameters()))  # base + adapters frozen
    held_labels = [_label(t) for t in held]
    summary = summarize_routing(router, request_features(composed, [encode(t) for t in held]), held_labels)
    assert summary.episode_accuracy >= 0.9, summary
    # the features are the base's: forcing an adapter would change them
    feats = request_features(composed, [encode(held[0])])
    with composed.forcing(1):
        out = composed.model(input_ids=torch.tensor([encode(held[0])]), output_hidden_states=True, use_cache=False)
    assert not torch.allclose(out.hidden_states[-1][0].mean(0), feats[0])


def test_saved_router_plays_each_episode_on_its_routed_slot(setup):
    root, base, composed, encode, texts = setup
    router = train_episode_router(composed, [encode(t) for t in texts[:80]], [_label(t) for t in texts[:80]],
                                  EpisodeRouterConfig())
    out = root / "composed"
    composed.save(out)
    router.save(out)
    assert composition_scope(out) == "episode"
    loaded = EpisodeRouter.load(out)
    assert torch.equal(loaded.weight, router.weight) and loaded.slot_names == ["base", *NAMES]

    spec = PolicySpec.from_dict({"kind": "composed", "name": "routed", "model": str(base), "adapter": str(out),
                                 "greedy": True, "max_new_tokens": 8})
    backend, adapter = build_backend(spec)
    assert adapter is None and isinstance(backend, TaskRoutedRolloutBackend)
    seeds = list(range(1_000_000, 1_000_008))
    requests = group_requests(ENV, {}, seeds)
    records = backend.rollout(requests, spec.sampling, adapter)
    expected = [d.slot for d in router.decide(request_features(composed, [encode(t) for t in _requests(seeds)]))]
    assert [r.info["route"]["slot"] for r in records] == expected
    assert len(set(expected)) == 2  # both slots are played, so the token check below tells them apart

    model, tokenizer = load_policy(base)
    plain = ComposedModel.load(out, model=model)
    forced = HFRolloutBackend(plain.model, tokenizer, policy_name="routed", render_tools=spec.render_tools)
    for i, record in enumerate(records):
        with plain.forcing(record.info["route"]["slot"]):
            again = forced.rollout([requests[i]], spec.sampling)[0]
        assert again.token_ids == record.token_ids

    # the routing trace colours every generated token with the episode's slot
    routed = route_record(plain, records[0])
    assert set(routed.slots) == {records[0].info["route"]["slot"]} and routed.positions
    bare = records[0].__class__.from_dict({**records[0].to_dict(), "info": {}})
    with pytest.raises(ValueError, match="route"):
        route_record(plain, bare)


def test_scope_is_validated_and_kept_out_of_old_stage_hashes():
    with pytest.raises(ValueError, match="scope"):
        GateConfig(scope="layer")
    with pytest.raises(ValueError, match="supervised"):
        MoEConfig.from_dict({"gate": {"scope": "episode"}, "train": {"method": "grpo_target"}})
    targets = MoEConfig.from_dict({"gate": {"scope": "episode"}, "train": {"method": "routing_targets"}})
    assert targets.hash_part()["train"]["method"] == "routing_targets"
    with pytest.raises(ValueError, match="pool"):
        EpisodeRouterConfig(pool="max")
    default = MoEConfig()
    assert "scope" not in default.hash_part()["gate"] and "episode_router" not in default.hash_part()
    episode = MoEConfig.from_dict({"gate": {"scope": "episode"}, "episode_router": {"weight_decay": 0.1}})
    assert episode.hash_part()["gate"]["scope"] == "episode"
    assert episode.hash_part()["episode_router"]["weight_decay"] == 0.1
    assert json.dumps(default.hash_part(), sort_keys=True) != json.dumps(episode.hash_part(), sort_keys=True)


def test_the_pipeline_fits_the_router_on_the_adapters_successes_and_holds_out_whole_requests(setup, tmp_path):
    from trace_envs.records import TrajectoryRecord, write_trajectories
    from trace_train.pipeline.config import PipelineConfig
    from trace_train.pipeline.stages import compose_adapters

    _, base, _, _, texts = setup
    outputs = {}
    for slot, name in enumerate(NAMES, start=1):
        run = tmp_path / name
        adapter = make_adapter(base, run / "adapters" / "v0001" / name, seed=400 + slot)
        records = [TrajectoryRecord(ENV, i, [{"role": "system", "content": f"hint for {name}"},
                                             {"role": "user", "content": t}], float(ok), ok, "done",
                                    token_ids=[1, 2, 3], loss_mask=[0, 1, 1])
                   for i, t in enumerate(texts) if _label(t) == slot
                   for ok in (True, True, False)]  # two successful members per request, one failed
        write_trajectories(run / "rollouts" / "iter_0000.jsonl", records)
        outputs[name] = {"adapter_dir": str(adapter)}
    moe = MoEConfig.from_dict({"gate": {"scope": "episode"}})
    out = compose_adapters(PipelineConfig.from_dict({}), str(base), outputs, tmp_path / "compose", moe)
    report = json.loads((tmp_path / "compose" / "routing_report.json").read_text())
    assert report["scope"] == "episode" and out["gate_rollouts"] == 0
    distinct = len(set(texts))
    assert report["episodes"] == 2 * max(1, distinct // 10)  # a tenth of the requests, both members of each
    assert report["episode_accuracy"] >= 0.9 and out["routing_accuracy"] == report["episode_accuracy"]
    metrics = json.loads((tmp_path / "compose" / "compose_metrics.json").read_text())
    assert metrics["examples"] + metrics["held_out"] == 2 * len(texts)  # successes only
    assert composition_scope(out["composed_dir"]) == "episode"
    assert EpisodeRouter.load(out["composed_dir"]).slot_names == ["base", *NAMES]


def test_the_gate_grpo_progress_bar_leaves_the_composition_hash_alone():
    quiet = MoEConfig.from_dict({"grpo": {"progress": False}})
    assert json.dumps(quiet.hash_part(), sort_keys=True) == json.dumps(MoEConfig().hash_part(), sort_keys=True)
    other_lr = MoEConfig.from_dict({"grpo": {"lr": 0.5}})
    assert json.dumps(other_lr.hash_part(), sort_keys=True) != json.dumps(MoEConfig().hash_part(), sort_keys=True)
