"""The capabilities-scale table's prompted row at k = all adapters is the main table's one prompted evaluation: it
is added once, however many ks of ``replication.scale`` reach all the adapters (review 43, finding 3)."""

from __future__ import annotations

import json
import types
from pathlib import Path

from trace_train.evaluation.metrics import RateCI
from trace_train.evaluation.replication_table import build_tables
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.replication import Replication, _Plan


def _result(successes: int) -> dict:
    return {"overall": RateCI(successes, 100).to_dict(), "mean_reward": 0.0}


def _plan(tmp_path: Path, n_adapters: int, scale: list[int]) -> tuple[list, list[str]]:
    """The real ``_plan_prompted_scale`` (real specs and stage hashes) with a runner that records the eval stages it
    is asked for: the table rows (the own run's first) and those stages."""
    caps = [f"cap{i}" for i in range(n_adapters)]
    (tmp_path / "eval").mkdir(exist_ok=True)
    (tmp_path / "analysis").mkdir(exist_ok=True)
    (tmp_path / "eval" / "eval.json").write_text(json.dumps({"policies": {"base": _result(17),
                                                                          "prompted": _result(27)}}))
    (tmp_path / "analysis" / "selected_capabilities.json").write_text(json.dumps(
        {"selected": [{"name": c, "description": f"does {c}"} for c in caps]}))
    cfg = PipelineConfig.from_dict({"replication": {"scale": scale}})
    stages: list[str] = []
    runner = types.SimpleNamespace(run=lambda stage, h, fn: stages.append(stage) or {"result": _result(20)})
    rep = object.__new__(Replication)
    rep.p, rep.cfg, rep.rep, rep.model = types.SimpleNamespace(run_dir=tmp_path, cfg=cfg), cfg, cfg.replication, "/m"
    rep.h_eval, rep.runner, rep.own_seed = "h", runner, 0
    own = types.SimpleNamespace(trained={c: {} for c in caps}, seed=0, baselines={}, composed=None)
    plan = _Plan()
    rep._plan_prompted_scale(own, plan)
    results = {job.key: job.fn({}) for job in plan.jobs}
    return rep._own_rows(own) + [row for build in plan.rows for row in build(results)], stages


def test_the_prompted_row_of_all_adapters_counts_once(tmp_path: Path):
    rows, stages = _plan(tmp_path, 3, [1, 2, 3, 4])  # synthesis passed 3 capabilities: k = 3 and 4 reach all
    assert stages == ["replication/eval/prompted, 1 descriptions", "replication/eval/prompted, 2 descriptions"]
    tables = build_tables(rows, {}, {}, seeds=[0, 1, 2], n_adapters=3)
    assert [row["k"] for row in tables["scale"]] == [1, 2, 3]
    last = tables["scale"][-1]["prompted"]
    assert last["n_seeds"] == 1 and [(p["seed"], p["rate"]) for p in last["per_seed"]] == [(None, 0.27)]


def test_a_scale_without_repeats_plans_the_same_rows_in_the_same_order(tmp_path: Path):
    """The tables stage hashes these rows in order: a run with no repeated k keeps its hash."""
    rows, stages = _plan(tmp_path, 4, [4, 1, 2, 3])
    assert [r.row for r in rows if r.table == "scale"] == ["prompted, 4 descriptions", "prompted, 1 descriptions",
                                                           "prompted, 2 descriptions", "prompted, 3 descriptions"]
    assert len(stages) == 3
