"""The replication benchmark's table of success by what the task needs: each main row's held-out episodes found
on disk per run seed (the eval stage's for the own seed, the replication eval stage's for the others), grouped
into tasks that need nothing, one capability alone, or several, and averaged over the seeds."""

from __future__ import annotations

import trace_envs  # noqa: F401  (registers the envs)
from trace_envs.records import task_capabilities, write_trajectories
from trace_envs.retail_sim import ENV_ID, ExpertKnobs, ScriptedExpert, split_seeds
from trace_train.rollout.base import EpisodeRequest
from trace_train.rollout.scripted import ScriptedRolloutBackend

BASE = ExpertKnobs(precondition=1.0, structured=1.0, multi_step=0.0, precision=0.0)
FIXES_STRUCTURED = ExpertKnobs(precondition=1.0, structured=0.0)
SEEDS = split_seeds("test", 40)


def play(knobs: ExpertKnobs, sample_offset: int):
    backend = ScriptedRolloutBackend(lambda s: ScriptedExpert(knobs, seed=s, name="p"))
    return backend.rollout([EpisodeRequest(ENV_ID, seed=s, sample_seed=s + sample_offset) for s in SEEDS])


def rate(records, want) -> float:
    picked = [r for r in records if want(tuple(sorted(task_capabilities(r.info) or ())))]
    return sum(r.success for r in picked) / len(picked)


def test_rows_by_need_average_each_seeds_own_episodes(tmp_path, load_benchmark):
    bench = load_benchmark("miniature_replication")
    base, s0, s1 = play(BASE, 0), play(FIXES_STRUCTURED, 0), play(FIXES_STRUCTURED, 7)
    write_trajectories(tmp_path / "eval" / "trajectories_base.jsonl", base)
    write_trajectories(tmp_path / "eval" / "trajectories_structured.jsonl", s0)
    write_trajectories(tmp_path / "replication" / "eval" / "structured@s1" / "trajectories_structured@s1.jsonl", s1)
    tables = {"seeds": [0, 1], "main": {
        "base": {"per_seed": [{"seed": None}]},
        "structured": {"per_seed": [{"seed": 0}, {"seed": 1}]},
        "mixture": {"per_seed": [{"seed": 0}]},  # no trajectories on disk: left out
    }}
    sizes, rows = bench.by_need(tmp_path, tables)
    assert set(rows) == {"base", "structured"}
    assert sum(sizes.values()) == len(SEEDS)
    alone = ("structured_data_reasoning",)
    want = rate(s0, lambda c: c == alone) / 2 + rate(s1, lambda c: c == alone) / 2
    assert abs(rows["structured"]["structured_data_reasoning"] - want) < 1e-12
    assert rows["base"]["structured_data_reasoning"] == rate(base, lambda c: c == alone)
    several = rate(s0, lambda c: len(c) >= 2) / 2 + rate(s1, lambda c: len(c) >= 2) / 2
    assert abs(rows["structured"]["(2+ capabilities)"] - several) < 1e-12
    # the fix is real on the tasks that need it alone
    assert rows["structured"]["structured_data_reasoning"] > rows["base"]["structured_data_reasoning"]
