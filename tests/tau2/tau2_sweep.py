"""Run one scripted policy over many τ² tasks, in forked worker processes when cores allow."""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass

import gymnasium as gym

import trace_envs  # noqa: F401  (registers the ids)
from trace_envs.tau2.policies import run_episode
from trace_envs.tau2.runtime import pristine_db


@dataclass(frozen=True)
class Outcome:
    task_id: str
    reward: float
    breakdown: dict
    termination: str
    db_hash: str | None
    nl: str | None


def _chunk(args: tuple[str, str, str, list[str]]) -> list[Outcome]:
    domain, task_file, policy, ids = args
    env = gym.make(f"trace/tau2-{domain}-v0", task_file=task_file, record_db_hash=True)
    out = []
    for tid in ids:
        rec = run_episode(env, policy, seed=0, options={"task_id": tid})
        out.append(Outcome(tid, rec.reward, rec.reward_breakdown, rec.termination, rec.info.get("end_db_hash"),
                           rec.info.get("nl_assertions")))
    pristine_hash = pristine_db(domain).get_hash()  # episodes never touched the shared DB
    return [Outcome("pristine", 1.0, {}, "", pristine_hash, None), *out]


def workers() -> int:
    return min(4, os.cpu_count() or 1)


def sweep(domain: str, task_file: str, policy: str, ids: list[str]) -> dict[str, Outcome]:
    pristine_db(domain)  # load once before forking: workers share it copy-on-write
    n = max(1, min(workers(), len(ids)))
    chunks = [(domain, task_file, policy, ids[i::n]) for i in range(n)]
    if n == 1:
        results = [_chunk(chunks[0])]
    else:
        with mp.get_context("fork").Pool(n) as pool:
            results = pool.map(_chunk, chunks)
    pristine = {o.db_hash for chunk in results for o in chunk if o.task_id == "pristine"}
    assert pristine == {pristine_db(domain).get_hash()}, "an episode modified the shared pristine DB"
    return {o.task_id: o for chunk in results for o in chunk if o.task_id != "pristine"}
