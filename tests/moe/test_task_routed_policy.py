"""The ``task_router`` policy: each episode routed once by the base model, then played on that adapter alone.

A real tiny composition: the shipped retail-sim-tiny base and two peft LoRA adapters with random non-zero
A and B, played on seeded retail-sim episodes.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from trace_moe import ComposedModel, TaskLevelRouter
from trace_moe.routers import (
    DESCRIPTIONS_FILE,
    composition_labels,
    first_user_message,
    save_route_descriptions,
    single_token_labels,
)
from trace_train.model import load_policy
from trace_train.paths import shipped_checkpoint
from trace_train.policies import PolicySpec, build_backend
from trace_train.rollout.base import SamplingParams, group_requests
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.task_routed import TaskRoutedRolloutBackend

from .moe_helpers import make_adapter

ENV = "trace/retail-sim-v0"
SEEDS = list(range(1_000_000, 1_000_008))  # the first test-split seeds
DESCRIPTIONS = {"returns": "return or exchange an item of a delivered order",
                "address": "ship a pending order to a new address"}


@pytest.fixture(scope="module")
def comp(tmp_path_factory):
    """(base dir, composition dir with no saved descriptions, composition dir with saved descriptions)."""
    import trace_envs  # noqa: F401  (registers the envs)

    root = tmp_path_factory.mktemp("task_router")
    base = shipped_checkpoint()
    adapters = [make_adapter(base, root / name, seed=200 + i) for i, name in enumerate(DESCRIPTIONS)]
    composed = ComposedModel.from_pretrained(base, adapters, adapter_names=list(DESCRIPTIONS))
    plain = composed.save(root / "composed")
    described = composed.save(root / "composed_described")
    save_route_descriptions(described, DESCRIPTIONS)
    return base, plain, described


def _spec(base, composed_dir, **kw) -> PolicySpec:
    data = {"kind": "task_router", "name": "router", "model": str(base), "adapter": str(composed_dir),
            "greedy": True, "max_new_tokens": 8, **kw}
    return PolicySpec.from_dict(data)


def _first_user_message(seed: int) -> str:
    env = gym.make(ENV)
    try:
        obs, _ = env.reset(seed=seed)
    finally:
        env.close()
    return first_user_message(list(obs))


def _without_route(record) -> dict:
    row = record.to_dict()
    row["info"] = {k: v for k, v in row["info"].items() if k != "route"}
    return row


@pytest.fixture(scope="module")
def played(comp):
    """The spec-built task_router policy on ``SEEDS`` under greedy decoding."""
    base, plain, _ = comp
    spec = _spec(base, plain, route_descriptions=DESCRIPTIONS)
    backend, adapter = build_backend(spec)
    assert adapter is None and isinstance(backend, TaskRoutedRolloutBackend)
    requests = group_requests(ENV, {}, SEEDS)
    return spec, requests, backend.rollout(requests, spec.sampling, adapter)


def test_routed_slot_is_the_base_models_task_level_decision(comp, played):
    base, plain, _ = comp
    _, _, records = played
    model, tokenizer = load_policy(base)  # the plain base: no composition installed
    labels = composition_labels(plain, DESCRIPTIONS)
    letters = single_token_labels(tokenizer, 3)
    assert letters and all(len(tokenizer(" " + x, add_special_tokens=False)["input_ids"]) == 1 for x in letters)
    assert letters != ["A", "B", "C"]  # " B" is two tokens here: plain letters would handicap one label
    router = TaskLevelRouter(model, tokenizer, labels, label_strings=letters)
    slots = []
    for seed, record in zip(SEEDS, records):
        expected = router.route(_first_user_message(seed))
        route = record.info["route"]
        assert record.seed == seed
        assert (route["slot"], route["label"]) == (expected.slot, expected.label)
        assert route["scores"] == pytest.approx(expected.scores, rel=1e-6, abs=1e-6)
        slots.append(route["slot"])
    assert len(set(slots)) >= 2  # the seeds do not all route alike, so the check above can tell slots apart
    assert json.loads(json.dumps(records[0].to_dict()))["info"]["route"]["label"] == records[0].info["route"]["label"]


def test_greedy_tokens_equal_the_composed_policy_forced_to_the_routed_slot(comp, played):
    base, plain, _ = comp
    spec, requests, records = played
    model, tokenizer = load_policy(base)
    composed = ComposedModel.load(plain, model=model)
    forced = HFRolloutBackend(composed.model, tokenizer, policy_name=spec.name, render_tools=spec.render_tools)
    by_slot: dict[int, list[int]] = {}
    for i, record in enumerate(records):
        by_slot.setdefault(record.info["route"]["slot"], []).append(i)
    differs = False
    for slot, rows in sorted(by_slot.items()):
        with composed.forcing(slot):
            same = forced.rollout([requests[i] for i in rows], spec.sampling)
        assert [r.to_dict() for r in same] == [_without_route(records[i]) for i in rows]
        other = (slot + 1) % composed.num_slots
        with composed.forcing(other):
            moved = forced.rollout([requests[i] for i in rows], spec.sampling)
        differs |= [r.token_ids for r in moved] != [records[i].token_ids for i in rows]
    assert differs  # the slot matters: the equality above is not the base model playing everywhere


def test_a_batch_mixing_slots_plays_each_episode_as_its_slot_alone(comp):
    base, plain, _ = comp
    model, tokenizer = load_policy(base)
    composed = ComposedModel.load(plain, model=model)
    labels = composition_labels(plain, DESCRIPTIONS)
    # letters chosen so that the two adapters (not the base) compete for these requests
    router = TaskLevelRouter(composed, tokenizer, labels, label_strings=["D", "A", "C"])
    backend = TaskRoutedRolloutBackend(composed, tokenizer, router, max_batch=3, policy_name="router",
                                       render_tools=False)
    requests = group_requests(ENV, {}, SEEDS[:6], group_size=2)  # two sampled members per seed
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    mixed = backend.rollout(requests, sampling)
    slots = [r.info["route"]["slot"] for r in mixed]
    assert {1, 2} <= set(slots)  # both adapters in one batch
    assert all(slots[2 * g] == slots[2 * g + 1] for g in range(6))  # members of a group route alike
    for slot in sorted(set(slots)):
        rows = [i for i, s in enumerate(slots) if s == slot]
        alone = backend.rollout([requests[i] for i in rows], sampling)
        assert [r.to_dict() for r in alone] == [mixed[i].to_dict() for i in rows]
    again = backend.rollout(requests, sampling)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in mixed]


def test_bad_task_router_specs_fail_clearly(comp, tmp_path):
    base, plain, _ = comp
    with pytest.raises(ValueError, match="task_router policy needs adapter="):
        PolicySpec.from_dict({"kind": "task_router", "model": str(base)})
    with pytest.raises(ValueError, match="needs model="):
        PolicySpec.from_dict({"kind": "task_router", "adapter": str(plain)})
    with pytest.raises(ValueError, match="route_descriptions is only read by a task_router"):
        PolicySpec.from_dict({"kind": "composed", "model": str(base), "adapter": str(plain),
                              "route_descriptions": DESCRIPTIONS})
    with pytest.raises(ValueError, match="is not a directory"):
        build_backend(_spec(base, tmp_path / "missing", route_descriptions=DESCRIPTIONS))
    with pytest.raises(ValueError, match="no compose.json"):
        build_backend(_spec(base, tmp_path, route_descriptions=DESCRIPTIONS))
    with pytest.raises(ValueError, match=r"no description for adapter\(s\) \['returns', 'address'\]"):
        build_backend(_spec(base, plain))
    with pytest.raises(ValueError, match=r"route descriptions for \['refunds'\]"):
        build_backend(_spec(base, plain, route_descriptions={**DESCRIPTIONS, "refunds": "money back"}))


def test_saved_descriptions_are_used_and_never_overwritten(comp):
    _, plain, described = comp
    assert [(lab.name, lab.description) for lab in composition_labels(described)] == list(DESCRIPTIONS.items())
    override = composition_labels(described, {"address": "change where an order goes"})
    assert [lab.description for lab in override] == [DESCRIPTIONS["returns"], "change where an order goes"]
    with pytest.raises(FileExistsError, match=DESCRIPTIONS_FILE):
        save_route_descriptions(described, DESCRIPTIONS)
    with pytest.raises(ValueError, match="no adapter named"):
        save_route_descriptions(plain, {"refunds": "money back"})


def test_evaluate_policies_scores_a_task_router_spec(comp, played, tmp_path):
    from trace_envs.records import read_trajectories
    from trace_train.evaluation.run import evaluate_policies

    base, _, described = comp
    _, _, records = played
    spec = _spec(base, described)  # descriptions from the composition's saved metadata
    results = evaluate_policies({"router": spec}, ENV, "test", episodes=2, out_dir=tmp_path, batch=2)
    assert results["router"]["overall"]["n"] == 2
    saved = read_trajectories(tmp_path / "trajectories_router.jsonl")
    assert [r.info["route"] for r in saved] == [r.info["route"] for r in records[:2]]
    assert [r.token_ids for r in saved] == [r.token_ids for r in records[:2]]


def test_rollout_command_plays_the_task_router_policy_group(comp, played, tmp_path, capsys):
    from tests.cli_runner import run_cli
    from trace_envs.records import read_trajectories

    base, _, described = comp
    _, _, records = played
    out = tmp_path / "routed.jsonl"
    code, stdout, stderr = run_cli("rollout", "policy=task_router", f"policy.model={base}",
                                   f"policy.adapter={described}", "policy.greedy=true", "policy.max_new_tokens=8",
                                   "split=test", "episodes=2", f"out={out}", hydra_dir=tmp_path / "hydra",
                                   capsys=capsys)
    assert code == 0, stderr
    saved = read_trajectories(out)
    assert [r.policy for r in saved] == ["task-router"] * 2
    assert [r.info["route"]["slot"] for r in saved] == [r.info["route"]["slot"] for r in records[:2]]


def test_rollout_command_takes_descriptions_on_the_command_line_and_refuses_a_router_without(comp, played,
                                                                                              tmp_path, capsys):
    """``policy.route_descriptions={name: text}`` is an ordinary override (the group's default is null, not a
    closed mapping); a composition whose adapters have no description is a one-line refusal before any work."""
    from tests.cli_runner import run_cli

    base, plain, _ = comp
    described = "{" + ", ".join(f'{k}: "{v}"' for k, v in DESCRIPTIONS.items()) + "}"
    common = ["policy=task_router", f"policy.model={base}", f"policy.adapter={plain}", "policy.greedy=true",
              "policy.max_new_tokens=8", "split=test", "episodes=2"]
    out = tmp_path / "routed.jsonl"
    code, _, stderr = run_cli("rollout", *common, f"policy.route_descriptions={described}", f"out={out}",
                              hydra_dir=tmp_path / "hydra", capsys=capsys)
    assert code == 0, stderr
    _, _, records = played
    from trace_envs.records import read_trajectories

    assert [r.info["route"]["slot"] for r in read_trajectories(out)] == [r.info["route"]["slot"] for r in records[:2]]
    refused = tmp_path / "refused.jsonl"
    code, _, stderr = run_cli("rollout", *common, f"out={refused}", hydra_dir=tmp_path / "hydra2", capsys=capsys)
    assert code == 2 and "no description for adapter(s)" in stderr and "Traceback" not in stderr
    assert not refused.exists()


def test_a_route_corpus_routes_by_the_nearest_solved_requests(comp, tmp_path):
    import numpy as np

    from trace_moe.retrieval_router import MeanPoolEmbedder, RetrievalRouter, write_route_corpus

    base, plain, _ = comp
    seeds = SEEDS[:4]
    messages = [_first_user_message(seed) for seed in seeds]
    corpus = {"returns": messages[:2], "address": messages[2:]}
    path = write_route_corpus(tmp_path / "route_corpus.json", corpus)
    spec = _spec(base, plain, route_descriptions=DESCRIPTIONS, route_corpus=str(path))
    backend, _ = build_backend(spec)
    assert isinstance(backend.router, RetrievalRouter)
    records = backend.rollout(group_requests(ENV, {}, seeds), spec.sampling)

    # the decision is the retrieval router's over the plain base (its embedder and classifier read slot 0 only)
    model, tokenizer = load_policy(base)
    labels = composition_labels(plain, DESCRIPTIONS)
    router = RetrievalRouter(TaskLevelRouter(model, tokenizer, labels, label_strings=single_token_labels(tokenizer, 3)),
                             corpus)
    for i, record in enumerate(records):
        expected = router.route(messages[i])
        route = record.info["route"]
        assert (route["slot"], route["label"]) == (expected.slot, expected.label)
        assert route["similarities"] == pytest.approx(expected.similarities, abs=1e-5)
        own = "returns" if i < 2 else "address"
        assert route["similarities"][own] == pytest.approx(1.0, abs=1e-5)  # its own request is in the corpus
        assert max(route["similarities"], key=route["similarities"].get) == own
    composed_embedding = backend.router.embedder.embed(messages[:1])
    assert np.allclose(composed_embedding, MeanPoolEmbedder(model, tokenizer).embed(messages[:1]), atol=1e-5)

    with pytest.raises(ValueError, match="route_corpus is only read by a task_router"):
        PolicySpec.from_dict({"kind": "composed", "model": str(base), "adapter": str(plain),
                              "route_corpus": str(path)})
    assert "route_corpus" not in _spec(base, plain).hash_part()  # specs without one keep their old hashes
    assert spec.hash_part()["route_corpus"] == str(path)


def test_rollout_command_names_a_missing_route_corpus(comp, tmp_path, capsys):
    from tests.cli_runner import run_cli

    base, _, described = comp
    code, _, stderr = run_cli("rollout", "policy=task_router", f"policy.model={base}", f"policy.adapter={described}",
                              f"policy.route_corpus={tmp_path / 'missing.json'}", "split=test", "episodes=1",
                              f"out={tmp_path / 'out.jsonl'}", hydra_dir=tmp_path / "hydra", capsys=capsys)
    assert code != 0
    assert "policy.route_corpus" in stderr and "missing.json" in stderr
    assert not (tmp_path / "out.jsonl").exists()
