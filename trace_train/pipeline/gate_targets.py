"""Gate data from the target's routing targets (``moe.train.method=routing_targets``).

Every slot alone -- the base, then the base with each adapter -- plays the same training seeds of the target;
each seed's best slot (``trace_moe.routing_targets``) labels every successful episode played on that seed, by
any slot (``moe.routing.label=best``), or each such episode is an example once per slot that solved the seed
(``solvers``). The gates then learn, on target tokens, which expert the task in front of them wants. The episode
router (``moe.gate.scope=episode``) learns instead from each seed's opening request and its target over the slots
(``routing_target_requests``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from trace_moe.config import RoutingTargetsConfig
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.policy_play import base_spec, play

logger = logging.getLogger(__name__)


def routing_target_examples(cfg: PipelineConfig, model_dir: str, adapters: dict[str, str],
                            routing: RoutingTargetsConfig, env: str | dict[str, float],
                            env_kwargs: dict[str, Any] | None) -> tuple[list, dict]:
    """``(examples, summary)``: GateExamples from ``env`` (the target, or the targets' mixture, with ``env_kwargs``;
    slot 0 = base, slot i = ``list(adapters)[i-1]``) and what was played and labelled (rollouts, per-slot mean
    reward, labels per slot)."""
    names = ["base", *adapters]
    return label_routing_episodes(play_slots(cfg, model_dir, adapters, routing, env, env_kwargs), names,
                                  routing.label)


def play_slots(cfg: PipelineConfig, model_dir: str, adapters: dict[str, str], routing: RoutingTargetsConfig,
               env: str | dict[str, float], env_kwargs: dict[str, Any] | None) -> list[list]:
    """Every slot alone (the base, then the base with each adapter) on the same ``routing.seeds`` training seeds
    of ``env``: one list of records per slot."""
    envs = [env] if isinstance(env, str) else list(env)
    per_slot = []
    for slot, name in enumerate(["base", *adapters]):
        spec = replace(base_spec(cfg, model_dir, name=f"route {name}", adapter=None if slot == 0 else adapters[name]),
                       greedy=routing.greedy)
        per_slot.append([record for env_id in envs
                         for record in play(spec, env_id, cfg.rollouts.split, routing.seeds, routing.seed_offset,
                                            routing.samples, batch=cfg.eval.batch_episodes, env_kwargs=env_kwargs)])
    return per_slot


def routing_target_requests(per_slot: list[list], names: list[str], label: str = "best"
                            ) -> tuple[list[str], np.ndarray, dict]:
    """``(requests, targets, summary)`` for the episode router from the episodes each slot played alone: each
    task's first user message and its target over the slots. ``label: best``: one-hot on the task's best slot
    (``trace_moe.routing_targets``), every task; ``solvers``: the task's distribution of mean reward over the
    slots (the paper's gate warm start), tasks on which no slot earned reward left out."""
    from trace_moe import routing_targets
    from trace_moe.routers import first_user_message

    tasks, rewards = _reward_matrix(per_slot)
    if label == "solvers":
        keep = rewards.sum(axis=1) > 0
        targets = rewards[keep] / rewards[keep].sum(axis=1, keepdims=True)
    else:
        keep = np.ones(len(tasks), dtype=bool)
        targets = np.eye(len(names))[routing_targets(rewards)]
    opening = {(r.env_id, r.seed): first_user_message(r.messages) for r in per_slot[0]}
    requests = [opening[task] for task, kept in zip(tasks, keep) if kept]
    summary = {"rollouts": sum(len(records) for records in per_slot), "seeds": len(tasks),
               "seeds_solved": int((rewards.max(axis=1) > 0).sum()), "requests": len(requests), "label": label,
               "slot_mean_reward": {name: float(rewards[:, s].mean()) for s, name in enumerate(names)},
               "target_mass": {name: float(targets[:, s].sum()) for s, name in enumerate(names)}}
    logger.info("episode-router targets on %d seeds (%d kept): %s", len(tasks), len(requests), summary["target_mass"])
    return requests, targets, summary


def label_routing_episodes(per_slot: list[list], names: list[str], label: str = "best") -> tuple[list, dict]:
    """``(examples, summary)`` from the episodes each slot played alone (``per_slot[i]``: slot ``names[i]``'s
    records, every slot on the same seeds), labelled as ``label`` says (``RoutingTargetsConfig.label``)."""
    from trace_moe import GateExample, routing_targets

    tasks, rewards = _reward_matrix(per_slot)
    index = {task: i for i, task in enumerate(tasks)}
    solved_by = np.zeros((len(tasks), len(names)), dtype=bool)
    for slot, records in enumerate(per_slot):
        for record in records:
            solved_by[index[(record.env_id, record.seed)], slot] |= bool(record.success)
    labels = routing_targets(rewards)
    examples = [GateExample(record.token_ids, record.loss_mask, slot, record.episode_id)
                for records in per_slot for record in records
                if record.success and record.token_ids and record.loss_mask
                for slot in _labels_of(index[(record.env_id, record.seed)], labels, solved_by, label)]
    solved = rewards.max(axis=1) > 0
    summary = {"rollouts": sum(len(records) for records in per_slot), "seeds": len(tasks),
               "seeds_solved": int(solved.sum()),
               "slot_mean_reward": {name: float(rewards[:, s].mean()) for s, name in enumerate(names)},
               "labels_of_solved_seeds": dict(Counter(names[int(s)] for s in labels[solved])),
               "examples": dict(Counter(names[e.label] for e in examples))}
    logger.info("routing targets on %d seeds (%d solved by some slot): %s; %d gate examples", len(tasks),
                summary["seeds_solved"], summary["labels_of_solved_seeds"], len(examples))
    return examples, summary


def _labels_of(task: int, best: np.ndarray, solved_by: np.ndarray, how: str) -> list[int]:
    """The labels one successful episode of ``task`` is an example for: its best slot, or every slot that solved
    it (``RoutingTargetsConfig.label``)."""
    if how == "solvers":
        return [int(s) for s in np.flatnonzero(solved_by[task])]
    return [int(best[task])]


def _reward_matrix(per_slot: list[list]) -> tuple[list[tuple[str, int]], np.ndarray]:
    """The tasks (env id, seed) the base played and the (tasks x slots) mean reward of each slot on each."""
    tasks = sorted({(r.env_id, r.seed) for r in per_slot[0]})
    index = {task: i for i, task in enumerate(tasks)}
    totals = np.zeros((len(tasks), len(per_slot)))
    counts = np.zeros((len(tasks), len(per_slot)))
    for slot, records in enumerate(per_slot):
        for record in records:
            task = index[(record.env_id, record.seed)]
            totals[task, slot] += record.reward
            counts[task, slot] += 1
    if (counts == 0).any():
        raise ValueError("routing targets: a slot did not play every seed the base played")
    return tasks, totals / counts
