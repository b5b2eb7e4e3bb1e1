"""pass^k is reported for every k up to the trials per seed, as README, conf/eval.yaml and conf/bench.yaml say, not
capped at 4 (review 43, finding 7): in the summary, the bench's rows and the evaluation's eval.json."""

from __future__ import annotations

import json
import math

from trace_envs.records import TrajectoryRecord
from trace_envs.retail_sim import ENV_ID
from trace_train.bench.run import compare, run_bench
from trace_train.evaluation import summarize
from trace_train.evaluation.run import evaluate_policies
from trace_train.policies import PolicySpec


def _records(trials: int) -> list[TrajectoryRecord]:
    return [TrajectoryRecord("e", seed, [], 1.0, (seed + t) % 3 != 0, "done", policy="p", info={})
            for seed in range(5) for t in range(trials)]


def test_pass_k_runs_up_to_the_trials():
    records = _records(8)
    summary = summarize(records, policy="p")
    assert list(summary.pass_k) == list(range(1, 9))
    # each seed solved 5 or 6 of its 8 trials: pass^6 only on the seeds with 6, pass^7 and pass^8 on none
    solved = [sum(r.success for r in records if r.seed == s) for s in range(5)]
    assert summary.pass_k[6] == sum(math.comb(c, 6) for c in solved) / (5 * math.comb(8, 6)) > 0
    assert summary.pass_k[7] == summary.pass_k[8] == 0.0
    assert sorted(compare("e", {"p": records}, "p")[0].pass_k, key=int) == [str(k) for k in range(1, 9)]


def test_eval_and_bench_report_pass_k_up_to_their_trials(tmp_path):
    oracle = {"oracle": PolicySpec(kind="oracle", name="oracle")}
    results = evaluate_policies(oracle, ENV_ID, "test", episodes=2, trials=6, out_dir=tmp_path / "eval")
    assert list(results["oracle"]["pass_k"]) == [str(k) for k in range(1, 7)]
    assert list(json.loads((tmp_path / "eval" / "eval.json").read_text())["policies"]["oracle"]["pass_k"]) == [
        str(k) for k in range(1, 7)]
    bench = run_bench(oracle, [ENV_ID], "test", episodes=2, trials=6)
    assert sorted(bench.rows[0].pass_k, key=int) == [str(k) for k in range(1, 7)]
