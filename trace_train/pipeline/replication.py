"""The miniature replication's rows beyond the pipeline's own (``pipeline.replication``), as resumable stages.

The pipeline trains every seeded row again for each of ``extra_seeds`` (``train/<cap>@s<seed>``,
``compose@s<seed>``, ``baselines/<name>@s<seed>``) beside its own run seed ``grpo.seed``. After its evaluation, this
composes the ablation variants (``replication/compose/<variant>[@s<seed>]``: top-k gates, the first k adapters,
gates trained by GRPO, checkpoints along training), evaluates each extra policy in a stage of its own
(``replication/eval/<policy>``) and writes the tables and goals (``replication/tables/tables.json``,
:mod:`trace_train.evaluation.replication_table`): one graph of jobs, ``pipeline.workers`` at once. An interrupted
run continues at the stage it stopped in.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from trace_envs.records import write_json_atomic
from trace_train.evaluation.replication_table import EPISODE_ROUTED, PolicyRow, build_tables
from trace_train.pipeline.policy_play import base_spec
from trace_train.pipeline.stage_runner import content_hash
from trace_train.pipeline.stages import (
    capability_prompt,
    compose_adapters,
    composition_part,
    gate_data_part,
    solved_requests,
)
from trace_train.workers import Job, run_jobs

if TYPE_CHECKING:
    from trace_train.pipeline.run import Pipeline, TrainedRun
    from trace_train.policies import PolicySpec

logger = logging.getLogger(__name__)

TRACE = "TRACE (composed)"
TABLES = "replication/tables/tables.json"
ROUTE_CORPUS_PER_CAPABILITY = 1024  # the newest solved training requests per adapter the task router retrieves over


def seeded(name: str, seed: int, own_seed: int) -> str:
    """A policy's name in one run seed: the own run keeps ``name``, another seed is ``name@s<seed>``."""
    return name if seed == own_seed else f"{name}@s{seed}"


@dataclass
class Variant:
    """One composed model the ablations add: its stage name, table, row label and how to build it."""

    stage: str
    table: str
    row: str
    seed: int
    build: Any  # callable(stage_dir) -> compose outputs
    hash_parts: tuple


class Replication:
    """The extra rows of ``preset=replication`` over a finished pipeline run (see the module docstring)."""

    def __init__(self, pipeline: Pipeline, model: str, envs: dict[str, Any], h_train: str, h_eval: str):
        self.p, self.cfg, self.rep = pipeline, pipeline.cfg, pipeline.cfg.replication
        self.model, self.envs, self.h_train, self.h_eval = model, envs, h_train, h_eval
        self.runner = pipeline.runner
        self.own_seed = pipeline.grpo_cfg.seed
        self.gate_rollouts: dict[str, int] = {}  # per own-seed variant row: the rollouts its gates played

    # -- orchestration -------------------------------------------------------------------------
    def run(self, own: TrainedRun, extra: list[TrainedRun]) -> dict[str, Any]:
        """The rows of ``own`` (the pipeline's run seed, evaluated) and of ``extra`` (the extra seeds' trained runs,
        in ``extra_seeds``' order) beyond the eval stage's, and the tables."""
        runs = [own, *extra]
        plan = _Plan()
        for run in runs:
            if run is not own:
                for name, spec in self._seed_policies(run).items():
                    plan.add(*self._eval_job(name, lambda _, spec=spec: spec, table="main", seed=run.seed))
            self._plan_variants(run, plan)
        self._plan_prompted_scale(own, plan)
        curves_of = self._plan_curves(own, plan) if self.rep.trace_curve else None
        results = run_jobs(plan.jobs, self.cfg.workers)
        self.runner.refresh()
        rows: list[PolicyRow] = self._own_rows(own) + [row for build in plan.rows for row in build(results)]
        for row, stage in plan.gate_stages.items():
            if not results[stage].get("skipped"):
                self.gate_rollouts[row] = results[stage].get("gate_rollouts", 0)
        curves = curves_of(results) if curves_of else {}
        gate_rollouts = (own.composed or {}).get("gate_rollouts", 0)  # what the gates played (target or envs)
        adapter_rollouts = sum(t["rollouts"] for t in own.trained.values())
        budgets = {"TRACE": adapter_rollouts + gate_rollouts}
        budgets.update({name: b["rollouts"] for name, b in own.baselines.items()})
        budgets.update({cap: t["rollouts"] for cap, t in own.trained.items()})
        if EPISODE_ROUTED in self.gate_rollouts:  # the same adapters plus the routing episodes it played
            budgets[EPISODE_ROUTED] = adapter_rollouts + self.gate_rollouts[EPISODE_ROUTED]
        seeds = [run.seed for run in runs]
        h = content_hash(self.h_eval, "tables", [asdict(r) for r in rows], curves, budgets, seeds)
        return self.runner.run("replication/tables", h,
                               lambda d: self._write_tables(rows, curves, budgets, seeds, len(own.trained), d))

    @staticmethod
    def _write_tables(rows: list[PolicyRow], curves: dict, budgets: dict[str, int], seeds: list[int],
                      n_adapters: int, out: Path) -> dict[str, Any]:
        tables = build_tables(rows, curves, budgets, seeds=seeds, n_adapters=n_adapters)
        write_json_atomic(out / "tables.json", tables)
        return {"tables": str(out / "tables.json"), "goals": tables["goals"]}

    # -- rows of the pipeline's own run (already evaluated by the eval stage) -------------------
    def _own_rows(self, own: TrainedRun) -> list[PolicyRow]:
        import json

        evaluation = json.loads((self.p.run_dir / "eval" / "eval.json").read_text())["policies"]
        rows = []
        for name, result in evaluation.items():
            seeded_row = name in own.trained or name in own.baselines or name == TRACE
            rows.append(PolicyRow(table="main", row=name, seed=own.seed if seeded_row else None,
                                  result=result, policy=name))
        return rows

    def _seed_policies(self, run: TrainedRun) -> dict[str, PolicySpec]:
        """The seeded rows of one extra seed: each adapter, TRACE and each trained baseline."""
        cfg, m = self.cfg, self.model
        policies = {seeded(cap, run.seed, self.own_seed): base_spec(cfg, m, name=cap, adapter=t["adapter_dir"])
                    for cap, t in run.trained.items()}
        if run.composed:
            policies[seeded(TRACE, run.seed, self.own_seed)] = base_spec(cfg, m, TRACE, run.composed["composed_dir"],
                                                                         kind="composed")
        policies.update({seeded(name, run.seed, self.own_seed): base_spec(cfg, m, name=name, adapter=b["adapter_dir"])
                         for name, b in run.baselines.items()})
        return policies

    # -- ablation variants (composed models over the same adapters) ------------------------------
    def _variants(self, run: TrainedRun) -> list[Variant]:
        cfg, moe, trained, seed, grpo = self.cfg, self.p.moe_cfg, run.trained, run.seed, self.p.grpo_cfg
        tag = "" if seed == self.own_seed else f"@s{seed}"
        variants = []
        slots = len(trained) + 1
        for k in self.rep.top_k:
            if k == moe.gate.top_k or k > slots:
                if k > slots:
                    logger.warning("replication.top_k=%d exceeds the %d slots (base + adapters); skipped", k, slots)
                continue
            gated = replace(moe, gate=replace(moe.gate, top_k=k))
            variants.append(Variant(f"replication/compose/top{k}{tag}", "routing", f"top-{k}", seed,
                                    lambda d, g=gated: compose_adapters(cfg, self.model, trained, d, g),
                                    ("top_k", k, *gate_data_part(gated, grpo))))
        ranked = list(trained)  # the analysis' ranking (by mean Δ) survives into the synthesis order
        for k in self.rep.scale:
            if k >= len(ranked):
                continue  # k = all adapters is TRACE itself
            subset = {cap: trained[cap] for cap in ranked[:k]}
            variants.append(Variant(f"replication/compose/first{k}{tag}", "scale", f"TRACE, {k} adapters", seed,
                                    lambda d, s=subset: compose_adapters(cfg, self.model, s, d, moe),
                                    ("scale", sorted(subset), *gate_data_part(moe, grpo))))
        for where in self.rep.gate_grpo:
            method = f"grpo_{where}"
            refined = replace(moe, train=replace(moe.train, method=method), grpo=replace(moe.grpo, seed=seed))
            variants.append(Variant(f"replication/compose/gates_grpo_{where}{tag}", "main",
                                    f"TRACE (gates refined by GRPO on the {where})", seed,
                                    lambda d, m=refined: compose_adapters(cfg, self.model, trained, d, m,
                                                                          gate_env=self.p.gate_env(self.envs,
                                                                                                   m.train.method)),
                                    ("gate_grpo", where, *gate_data_part(refined, grpo))))
        if self.rep.episode_router and moe.gate.scope != "episode":
            # the quick preset's TRACE: the global router fitted to the target's routing targets (moe.routing)
            routed = replace(moe, gate=replace(moe.gate, scope="episode"),
                             train=replace(moe.train, method="routing_targets"))
            variants.append(Variant(f"replication/compose/episode_router{tag}", "main", EPISODE_ROUTED, seed,
                                    lambda d, m=routed: compose_adapters(
                                        cfg, self.model, trained, d, m,
                                        gate_env=self.p.gate_env(self.envs, m.train.method)),
                                    ("episode_router", "routing_targets")))
        return variants

    def _plan_variants(self, run: TrainedRun, plan: _Plan) -> None:
        """Each ablation variant of one run seed (compose, then evaluate) and its task-level router."""
        h = content_hash(self.h_train, "seed", run.seed)
        for v in self._variants(run):
            hash_ = content_hash(h, sorted(run.trained), *v.hash_parts, asdict(self.cfg.compose),
                                 self.p.moe_cfg.hash_part())
            plan.jobs.append(self._compose_job(v.stage, hash_, v.build, self.cfg.eval.episodes))
            if v.seed == self.own_seed:
                plan.gate_stages[v.row] = v.stage
            plan.add(*self._eval_job(seeded(v.row, v.seed, self.own_seed), self._composed_spec(v.stage, v.row),
                                     table=v.table, seed=v.seed, row=v.row, after=(v.stage,)))
        if self.rep.task_router and run.composed:
            name = seeded("task-level router", run.seed, self.own_seed)

            def router(_: Mapping[str, Any], run=run) -> PolicySpec:
                return replace(base_spec(self.cfg, self.model, "task-level router", run.composed["composed_dir"],
                                         kind="task_router"), route_descriptions=self._descriptions(run.trained),
                               route_corpus=self._route_corpus(run, h) if self.rep.task_router_corpus else None)

            plan.add(*self._eval_job(name, router, table="main", seed=run.seed, row="task-level router"))

    def _compose_at(self, at: dict[str, dict[str, Any]], iteration: int, out: Path) -> dict[str, Any]:
        """TRACE over the adapters as they stood at ``iteration`` (gates on the rollouts played before it)."""
        return compose_adapters(self.cfg, self.model, at, out, self.p.moe_cfg, before_iteration=iteration,
                                gate_env=self.p.gate_env(self.envs, self.p.moe_cfg.train.method))

    def _compose_job(self, stage: str, hash_: str, build: Callable[[Path], dict[str, Any]], episodes: int) -> Job:
        """The job of a composed variant's stage (costed with the evaluation that waits for it)."""
        return Job(stage, lambda _: self.runner.run(stage, hash_, build), cost=2 * episodes)

    def _composed_spec(self, stage: str, name: str) -> Callable[[Mapping[str, Any]], PolicySpec | None]:
        """What evaluates compose stage ``stage``'s model as ``name`` (None when the stage skipped composing)."""
        def spec_of(done: Mapping[str, Any]) -> PolicySpec | None:
            out = done[stage]
            if out.get("skipped"):
                logger.warning("%s skipped: %s", stage, out["skipped"])
                return None
            return base_spec(self.cfg, self.model, name, out["composed_dir"], kind="composed")

        return spec_of

    def _route_corpus(self, run: TrainedRun, h: str) -> str:
        """The retrieval corpus of one seed's task-level router: the requests its adapters' GRPO runs solved."""
        from trace_moe.retrieval_router import corpus_from_examples, write_route_corpus

        stage = f"replication/route_corpus{'' if run.seed == self.own_seed else f'@s{run.seed}'}"

        def build(d: Path) -> dict[str, Any]:
            corpus = corpus_from_examples(solved_requests(run.trained, ROUTE_CORPUS_PER_CAPABILITY))
            if not corpus:
                raise ValueError("no successful capability-env rollouts for the task-level router's route corpus")
            path = write_route_corpus(d / "route_corpus.json", corpus)
            return {"route_corpus": str(path), "requests": {cap: len(texts) for cap, texts in corpus.items()}}

        return self.runner.run(stage, content_hash(h, sorted(run.trained), "route_corpus",
                                                   ROUTE_CORPUS_PER_CAPABILITY), build)["route_corpus"]

    def _descriptions(self, trained: dict[str, Any]) -> dict[str, str]:
        """What the task-level router reads for each adapter: the analysis' description of its capability."""
        import json

        doc = json.loads((self.p.run_dir / "analysis" / "selected_capabilities.json").read_text())
        described = {c["name"]: c.get("description", "") for c in doc.get("selected", [])}
        return {cap: described.get(cap) or cap.replace("_", " ") for cap in trained}

    # -- the prompted base with the first k descriptions ---------------------------------------
    def _plan_prompted_scale(self, own: TrainedRun, plan: _Plan) -> None:
        """The prompted base with the analysis' first k descriptions (k = all: the main table's prompted row, added
        once however many ks of ``replication.scale`` reach all the adapters: it is one evaluation, not one per k)."""
        ranked = list(own.trained)
        selected = self.p.run_dir / "analysis" / "selected_capabilities.json"
        all_added = False
        for k in self.rep.scale:
            if k >= len(ranked):
                if not all_added:
                    prompted = [replace(r, table="scale", row=f"prompted, {len(ranked)} descriptions")
                                for r in self._own_rows(own) if r.row == "prompted"]
                    plan.rows.append(lambda _, rows=prompted: rows)
                    all_added = True
                continue
            row = f"prompted, {k} descriptions"
            spec = base_spec(self.cfg, self.model, name=row, system_suffix=capability_prompt(selected, ranked[:k]))
            plan.add(*self._eval_job(row, lambda _, spec=spec: spec, table="scale", seed=None, row=row))

    # -- evaluation: one resumable stage per policy ---------------------------------------------
    def _eval_job(self, name: str, spec_of: Callable[[Mapping[str, Any]], PolicySpec | None], table: str,
                  seed: int | None, row: str | None = None, episodes: int | None = None,
                  after: tuple[str, ...] = ()) -> tuple[Job, Callable[[Mapping[str, Any]], list[PolicyRow]]]:
        """The job that evaluates ``spec_of(results)`` (None: nothing to evaluate) in stage
        ``replication/eval/<name>`` (``replication/curve/<name>`` at ``eval.curve_episodes``), and its table rows."""
        from trace_train.evaluation.run import evaluate_policies

        e = self.cfg.eval
        episodes = episodes or e.episodes
        stage = f"replication/eval/{name}" if episodes == e.episodes else f"replication/curve/{name}"

        def evaluate(done: Mapping[str, Any]) -> dict[str, Any] | None:
            spec = spec_of(done)
            if spec is None:
                return None
            spec = replace(spec, greedy=e.greedy)

            def play(d: Path) -> dict[str, Any]:
                if self.cfg.multi_target:
                    results = self.p._eval_targets({name: spec}, d)
                else:
                    results = evaluate_policies({name: spec}, self.cfg.target_env, e.split, episodes, e.trials,
                                                out_dir=d, batch=e.batch_episodes,
                                                env_kwargs=self.cfg.env_kwargs(self.cfg.target_env, e.split))
                return {"result": results[name]}

            hash_ = content_hash(self.h_eval, stage, spec.hash_part(), episodes, *composition_part(spec))
            return self.runner.run(stage, hash_, play)["result"]

        base_name = row or (name.rsplit("@s", 1)[0] if "@s" in name else name)

        def rows(results: Mapping[str, Any]) -> list[PolicyRow]:
            result = results[stage]
            return [] if result is None else [PolicyRow(table=table, row=base_name, seed=seed, result=result,
                                                        policy=name)]

        return Job(stage, evaluate, after, cost=episodes), rows

    # -- sample efficiency: TRACE from each checkpoint vs GRPO on the target ---------------------
    def _plan_curves(self, own: TrainedRun, plan: _Plan) -> Callable[[Mapping[str, Any]], dict[str, list]]:
        """Held-out success vs training rollouts on ``eval.curve_episodes`` seeds (the own run seed): TRACE composed
        from every adapter checkpoint (gates trained on the rollouts before it) and each GRPO-on-target baseline's
        checkpoints. Returns what reads the curves off the jobs' results."""
        cfg, episodes = self.cfg, self.cfg.eval.curve_episodes
        iterations = sorted({v["iteration"] for t in own.trained.values() for v in t["versions"]})
        trace_points: list[tuple[str, str, int]] = []  # (compose stage, eval stage, adapter rollouts)
        for it in iterations:
            at = {cap: {**t, "adapter_dir": next(v["dir"] for v in t["versions"] if v["iteration"] == it)}
                  for cap, t in own.trained.items() if any(v["iteration"] == it for v in t["versions"])}
            if len(at) != len(own.trained):
                continue
            stage = f"replication/compose/at{it:04d}"
            hash_ = content_hash(self.h_train, stage, asdict(cfg.compose), self.p.moe_cfg.hash_part(),
                                 *gate_data_part(self.p.moe_cfg, self.p.grpo_cfg))
            plan.jobs.append(self._compose_job(stage, hash_, partial(self._compose_at, at, it), episodes))
            name = f"TRACE@{it}"
            job, _ = self._eval_job(name, self._composed_spec(stage, name), table="curve", seed=own.seed, row=name,
                                    episodes=episodes, after=(stage,))
            plan.jobs.append(job)
            rollouts = sum(next(v["rollouts"] for v in t["versions"] if v["iteration"] == it)
                           for t in own.trained.values())
            trace_points.append((stage, job.key, rollouts))
        baseline_points: dict[str, list[tuple[str, int]]] = {}
        for name in ("grpo_target", "grpo_target_4x"):
            baseline = own.baselines.get(name)
            if not baseline or baseline.get("checkpoint_of"):
                continue  # the 1x row taken from the 4x run: its points are the 4x curve's first ones
            for version in baseline["versions"]:
                policy = f"{name}@{version['iteration']}"
                spec = base_spec(cfg, self.model, name=policy, adapter=version["dir"])
                job, _ = self._eval_job(policy, lambda _, spec=spec: spec, table="curve", seed=own.seed, row=policy,
                                        episodes=episodes)
                plan.jobs.append(job)
                baseline_points.setdefault(name, []).append((job.key, version["rollouts"]))

        def curves(results: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
            out = {"TRACE": [{"rollouts": rollouts + results[compose].get("gate_rollouts", 0),
                              **results[evaluated]["overall"]}
                             for compose, evaluated, rollouts in trace_points if results[evaluated] is not None]}
            out.update({name: [{"rollouts": rollouts, **results[key]["overall"]} for key, rollouts in points]
                        for name, points in baseline_points.items()})
            return out

        return curves


@dataclass
class _Plan:
    """The replication's jobs after training, and per table row group what reads its rows off their results."""

    jobs: list[Job] = field(default_factory=list)
    rows: list[Callable[[Mapping[str, Any]], list[PolicyRow]]] = field(default_factory=list)
    gate_stages: dict[str, str] = field(default_factory=dict)  # own-seed variant row -> its compose stage

    def add(self, job: Job, rows: Callable[[Mapping[str, Any]], list[PolicyRow]]) -> None:
        self.jobs.append(job)
        self.rows.append(rows)


def load_tables(run_dir: str | Path) -> dict[str, Any] | None:
    """``replication/tables.json`` of a run directory, or None when the run has no replication rows."""
    import json

    path = Path(run_dir) / TABLES
    return json.loads(path.read_text()) if path.exists() else None

