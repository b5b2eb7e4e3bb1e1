"""Gate data from the target's routing targets (``moe.train.method=routing_targets``).

Every slot alone -- the base, then the base with each adapter -- plays the same training seeds of the target;
each seed's best slot (``trace_moe.routing_targets``) labels every successful episode played on that seed, by
any slot. The gates then learn, on target tokens, which expert the task in front of them wants.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from trace_moe.config import RoutingTargetsConfig
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.stages import base_spec, play

logger = logging.getLogger(__name__)


def routing_target_examples(cfg: PipelineConfig, model_dir: str, adapters: dict[str, str],
                            routing: RoutingTargetsConfig, env: str | dict[str, float],
                            env_kwargs: dict[str, Any] | None) -> tuple[list, dict]:
    """``(examples, summary)``: GateExamples from ``env`` (the target, or the targets' mixture, with ``env_kwargs``;
    slot 0 = base, slot i = ``list(adapters)[i-1]``) and what was played and labelled (rollouts, per-slot mean
    reward, labels per slot)."""
    from trace_moe import GateExample, routing_targets

    names = ["base", *adapters]
    envs = [env] if isinstance(env, str) else list(env)
    split = cfg.rollouts.split
    per_slot = []
    for slot, name in enumerate(names):
        spec = replace(base_spec(cfg, model_dir, name=f"route {name}", adapter=None if slot == 0 else adapters[name]),
                       greedy=routing.greedy)
        per_slot.append([record for env_id in envs
                         for record in play(spec, env_id, split, routing.seeds, routing.seed_offset, routing.samples,
                                            batch=cfg.eval.batch_episodes, env_kwargs=env_kwargs)])
    tasks = sorted({(r.env_id, r.seed) for r in per_slot[0]})
    index = {task: i for i, task in enumerate(tasks)}
    totals = np.zeros((len(tasks), len(names)))
    counts = np.zeros((len(tasks), len(names)))
    for slot, records in enumerate(per_slot):
        for record in records:
            totals[index[(record.env_id, record.seed)], slot] += record.reward
            counts[index[(record.env_id, record.seed)], slot] += 1
    if (counts == 0).any():
        raise ValueError("routing targets: a slot did not play every seed the base played")
    rewards = totals / counts
    labels = routing_targets(rewards)
    examples = [GateExample(record.token_ids, record.loss_mask, int(labels[index[(record.env_id, record.seed)]]),
                            record.episode_id)
                for records in per_slot for record in records
                if record.success and record.token_ids and record.loss_mask]
    solved = rewards.max(axis=1) > 0
    summary = {"rollouts": sum(len(records) for records in per_slot), "seeds": len(tasks),
               "seeds_solved": int(solved.sum()),
               "slot_mean_reward": {name: float(rewards[:, s].mean()) for s, name in enumerate(names)},
               "labels_of_solved_seeds": dict(Counter(names[int(s)] for s in labels[solved])),
               "examples": dict(Counter(names[e.label] for e in examples))}
    logger.info("routing targets on %d seeds (%d solved by some slot): %s; %d gate examples", len(tasks),
                summary["seeds_solved"], summary["labels_of_solved_seeds"], len(examples))
    return examples, summary
