"""Routing targets (moe.train.method=routing_targets): each task's best slot, and gates trained on the target."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trace_train.pipeline.gate_targets as gate_targets
import trace_train.pipeline.stages as stages
from trace_moe import routing_targets
from trace_moe.config import MoEConfig
from trace_train.paths import REPO_ROOT
from trace_train.pipeline.config import PipelineConfig

from .moe_helpers import make_adapter

torch.set_num_threads(1)

SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"
ENV = "trace/precondition_verification-v0"


def test_the_best_slot_wins_and_ties_go_to_the_best_slot_on_average():
    rewards = np.array([[0.0, 1.0, 0.0],    # only slot 1 solves it
                        [0.5, 0.0, 0.25],   # the base is best
                        [0.0, 0.0, 0.0],    # nobody: the best slot on average (slot 1: 0.4 vs 0.3 and 0.35)
                        [1.0, 1.0, 1.0],    # everybody: the same
                        [0.0, 0.0, 0.5]])   # only slot 2
    assert routing_targets(rewards).tolist() == [1, 0, 1, 1, 2]
    # equal averages: the lower index (the base first)
    assert routing_targets(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])).tolist() == [0, 1, 0]


@pytest.mark.parametrize("bad", [np.zeros((0, 3)), np.zeros(3), np.array([[np.nan, 1.0]])])
def test_routing_targets_refuse_what_is_not_a_finite_tasks_by_slots_matrix(bad):
    with pytest.raises(ValueError, match="rewards must be"):
        routing_targets(bad)


def _make_adapter(out, seed: int) -> str:
    """A LoRA adapter on the shipped base with small random A and B (a different but working policy)."""
    return str(make_adapter(SHIPPED, out, seed, targets=["q_proj", "v_proj"], std=0.1))


def test_compose_trains_the_gates_on_target_successes_labelled_by_their_seeds_best_slot(tmp_path, monkeypatch):
    adapters = {name: _make_adapter(tmp_path / name, seed) for name, seed in (("cap_a", 1), ("cap_b", 2))}
    cfg = PipelineConfig.from_dict({"target_env": ENV, "policy": {"threads": 1, "max_new_tokens": 48}})
    moe = MoEConfig.from_dict({"train": {"method": "routing_targets", "epochs": 1},
                               "routing": {"seeds": 6, "samples": 2, "seed_offset": 3}})
    played, trained_on = {}, []
    real_play = gate_targets.play

    def spy_play(spec, env_id, split, episodes, offset=0, trials=1, **kw):
        records = real_play(spec, env_id, split, episodes, offset, trials, **kw)
        played[spec.name] = records
        return records

    import trace_moe

    real_train = trace_moe.train_gates

    def spy_train(composed, examples, train_cfg):
        trained_on.extend(examples)
        return real_train(composed, examples, train_cfg)

    monkeypatch.setattr(gate_targets, "play", spy_play)
    monkeypatch.setattr(trace_moe, "train_gates", spy_train)
    train_outputs = {name: {"adapter_dir": path} for name, path in adapters.items()}
    out = stages.compose_adapters(cfg, str(SHIPPED), train_outputs, tmp_path / "compose", moe,
                                  gate_env=(ENV, None))

    slots = ["route base", "route cap_a", "route cap_b"]
    assert list(played) == slots
    for records in played.values():  # every slot played the same seeds, `samples` times each
        assert sorted(r.seed for r in records) == sorted(
            [r.seed for r in played["route base"]]) and len(records) == 12
    seeds = sorted({r.seed for r in played["route base"]})
    rewards = np.array([[np.mean([r.reward for r in played[s] if r.seed == seed]) for s in slots] for seed in seeds])
    label_of = dict(zip(seeds, routing_targets(rewards)))
    successes = [r for s in slots for r in played[s] if r.success]
    assert successes, "no slot solved a seed; the test needs a seed some slot solves"
    # the gates trained on 90 % of exactly the successful episodes, each labelled with its seed's best slot
    expected = {r.episode_id: int(label_of[r.seed]) for r in successes}
    assert len(trained_on) == len(successes) - max(1, len(successes) // 10)
    assert all(expected[e.episode_id] == e.label for e in trained_on)
    summary = out["routing_targets"]
    assert summary["rollouts"] == 36 and out["gate_rollouts"] == 36 and summary["seeds"] == 6
    assert summary["seeds_solved"] == int((rewards.max(axis=1) > 0).sum())
    assert (tmp_path / "compose" / "composed").is_dir()


def test_routing_targets_without_the_target_env_fail_before_playing(tmp_path):
    cfg = PipelineConfig.from_dict({"target_env": ENV})
    moe = MoEConfig.from_dict({"train": {"method": "routing_targets"}})
    adapter = _make_adapter(tmp_path / "cap_a", 1)
    with pytest.raises(ValueError, match="routing_targets needs the target env"):
        stages.compose_adapters(cfg, str(SHIPPED), {"cap_a": {"adapter_dir": adapter}}, tmp_path / "c", moe)
    with pytest.raises(ValueError, match="seeds and samples must be >= 1"):
        MoEConfig.from_dict({"routing": {"samples": 0}})


def test_greedy_routing_targets_decode_greedily_once_per_slot_and_seed(tmp_path, monkeypatch):
    adapter = _make_adapter(tmp_path / "cap_a", 1)
    cfg = PipelineConfig.from_dict({"target_env": ENV, "policy": {"threads": 1, "max_new_tokens": 48}})
    routing = MoEConfig.from_dict({"routing": {"seeds": 4, "samples": 1, "greedy": True}}).routing
    specs = []
    real_play = gate_targets.play

    def spy_play(spec, *args, **kw):
        specs.append(spec)
        return real_play(spec, *args, **kw)

    monkeypatch.setattr(gate_targets, "play", spy_play)
    examples, summary = gate_targets.routing_target_examples(cfg, str(SHIPPED), {"cap_a": adapter}, routing, ENV, None)
    assert [s.greedy for s in specs] == [True, True] and summary["rollouts"] == 8
    assert {e.label for e in examples} <= {0, 1}
    with pytest.raises(ValueError, match="samples must be 1"):
        MoEConfig.from_dict({"routing": {"greedy": True, "samples": 2}})


def _episode(seed: int, slot: str, success: bool):
    from trace_envs.records import TrajectoryRecord

    return TrajectoryRecord("t", seed, [], float(success), success, "done", policy=slot,
                            token_ids=[1, 2, seed], loss_mask=[0, 1, 1])


def test_solver_labels_give_each_successful_episode_once_per_slot_that_solved_its_seed():
    names = ["base", "a", "b"]
    solved = {0: {"base", "a", "b"}, 1: {"b"}, 2: set(), 3: {"a", "b"}}  # seed -> slots that solve it
    per_slot = [[_episode(seed, name, name in solvers) for seed, solvers in solved.items()] for name in names]
    best, summary = gate_targets.label_routing_episodes(per_slot, names, "best")
    # slot b is best on average (3 of 4), so it wins every tie: each of the 6 successful episodes labelled b
    assert sorted((e.input_ids[-1], e.label) for e in best) == [(0, 2)] * 3 + [(1, 2)] + [(3, 2)] * 2
    assert summary["labels_of_solved_seeds"] == {"b": 3} and summary["seeds_solved"] == 3
    solvers, summary = gate_targets.label_routing_episodes(per_slot, names, "solvers")
    pairs = sorted((e.input_ids[-1], e.label) for e in solvers)
    assert pairs == sorted([(0, s) for s in (0, 1, 2)] * 3 + [(1, 2)] + [(3, s) for s in (1, 2)] * 2)
    assert summary["examples"] == {"base": 3, "a": 5, "b": 6}
    with pytest.raises(ValueError, match="label"):
        MoEConfig.from_dict({"routing": {"label": "worst"}})
