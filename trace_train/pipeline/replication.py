"""The miniature replication's rows beyond the pipeline's own (``pipeline.replication``), as resumable stages.

After the pipeline's own run (seed ``grpo.seed``) and its evaluation, this trains every seeded row again for each
of ``extra_seeds`` (``train/<cap>@s<seed>``, ``compose@s<seed>``, ``baselines/<name>@s<seed>``), composes the
ablation variants (``replication/compose/<variant>[@s<seed>]``: top-k gates, the first k adapters, gates trained by
GRPO, checkpoints along training), evaluates each extra policy in a stage of its own
(``replication/eval/<policy>``) and writes the tables and goals (``replication/tables/tables.json``,
:mod:`trace_train.evaluation.replication_table`). An interrupted run continues at the stage it stopped in.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trace_envs.records import write_json_atomic
from trace_train.evaluation.replication_table import EPISODE_ROUTED, PolicyRow, build_tables
from trace_train.pipeline.stage_runner import content_hash
from trace_train.pipeline.stages import base_spec, capability_prompt, compose_adapters, solved_requests

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
    def run(self, own: TrainedRun) -> dict[str, Any]:
        runs = [own] + [self.p.train_run(self.model, self.envs, self.h_train, seed) for seed in self.rep.extra_seeds]
        rows: list[PolicyRow] = self._own_rows(own)
        for run in runs:
            if run is not own:
                rows.extend(self._evaluate(self._seed_policies(run), table="main", seed=run.seed))
            rows.extend(self._variant_rows(run))
        rows.extend(self._prompted_scale_rows(own))
        curves = self._curves(own) if self.rep.trace_curve else {}
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
        cfg, moe, trained, seed = self.cfg, self.p.moe_cfg, run.trained, run.seed
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
                                    ("top_k", k)))
        ranked = list(trained)  # the analysis' ranking (by mean Δ) survives into the synthesis order
        for k in self.rep.scale:
            if k >= len(ranked):
                continue  # k = all adapters is TRACE itself
            subset = {cap: trained[cap] for cap in ranked[:k]}
            variants.append(Variant(f"replication/compose/first{k}{tag}", "scale", f"TRACE, {k} adapters", seed,
                                    lambda d, s=subset: compose_adapters(cfg, self.model, s, d, moe),
                                    ("scale", sorted(subset))))
        for where in self.rep.gate_grpo:
            method = f"grpo_{where}"
            refined = replace(moe, train=replace(moe.train, method=method), grpo=replace(moe.grpo, seed=seed))
            variants.append(Variant(f"replication/compose/gates_grpo_{where}{tag}", "main",
                                    f"TRACE (gates refined by GRPO on the {where})", seed,
                                    lambda d, m=refined: compose_adapters(cfg, self.model, trained, d, m,
                                                                          gate_env=self.p.gate_env(self.envs,
                                                                                                   m.train.method)),
                                    ("gate_grpo", where)))
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

    def _variant_rows(self, run: TrainedRun) -> list[PolicyRow]:
        rows: list[PolicyRow] = []
        h = content_hash(self.h_train, "seed", run.seed)
        for v in self._variants(run):
            out = self.runner.run(v.stage, content_hash(h, sorted(run.trained), *v.hash_parts,
                                                        asdict(self.cfg.compose), self.p.moe_cfg.hash_part()), v.build)
            if out.get("skipped"):
                logger.warning("%s skipped: %s", v.stage, out["skipped"])
                continue
            name = seeded(v.row, v.seed, self.own_seed)
            if v.seed == self.own_seed:
                self.gate_rollouts[v.row] = out.get("gate_rollouts", 0)
            spec = base_spec(self.cfg, self.model, v.row, out["composed_dir"], kind="composed")
            rows.extend(self._evaluate({name: spec}, table=v.table, seed=v.seed, row=v.row))
        if self.rep.task_router and run.composed:
            name = seeded("task-level router", run.seed, self.own_seed)
            spec = replace(base_spec(self.cfg, self.model, "task-level router", run.composed["composed_dir"],
                                     kind="task_router"), route_descriptions=self._descriptions(run.trained),
                           route_corpus=self._route_corpus(run, h) if self.rep.task_router_corpus else None)
            rows.extend(self._evaluate({name: spec}, table="main", seed=run.seed, row="task-level router"))
        return rows

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
    def _prompted_scale_rows(self, own: TrainedRun) -> list[PolicyRow]:
        """The prompted base with the analysis' first k descriptions (k = all: the main table's prompted row)."""
        ranked, rows = list(own.trained), []
        selected = self.p.run_dir / "analysis" / "selected_capabilities.json"
        for k in self.rep.scale:
            if k >= len(ranked):
                rows.extend(replace(r, table="scale", row=f"prompted, {len(ranked)} descriptions")
                            for r in self._own_rows(own) if r.row == "prompted")
                continue
            row = f"prompted, {k} descriptions"
            spec = base_spec(self.cfg, self.model, name=row, system_suffix=capability_prompt(selected, ranked[:k]))
            rows.extend(self._evaluate({row: spec}, table="scale", seed=None, row=row))
        return rows

    # -- evaluation: one resumable stage per policy ---------------------------------------------
    def _evaluate(self, policies: dict[str, PolicySpec], table: str, seed: int | None, row: str | None = None,
                  episodes: int | None = None) -> list[PolicyRow]:
        from trace_train.evaluation.run import evaluate_policies

        e = self.cfg.eval
        episodes = episodes or e.episodes
        rows = []
        for name, spec in policies.items():
            spec = replace(spec, greedy=e.greedy)
            stage = f"replication/eval/{name}" if episodes == e.episodes else f"replication/curve/{name}"
            h = content_hash(self.h_eval, stage, spec.hash_part(), episodes)

            def play(d: Path, name=name, spec=spec) -> dict[str, Any]:
                if self.cfg.multi_target:
                    results = self.p._eval_targets({name: spec}, d)
                else:
                    results = evaluate_policies({name: spec}, self.cfg.target_env, e.split, episodes, e.trials,
                                                out_dir=d, batch=e.batch_episodes,
                                                env_kwargs=self.cfg.env_kwargs(self.cfg.target_env, e.split))
                return {"result": results[name]}

            result = self.runner.run(stage, h, play)["result"]
            base_name = row or (name.rsplit("@s", 1)[0] if "@s" in name else name)
            rows.append(PolicyRow(table=table, row=base_name, seed=seed, result=result, policy=name))
        return rows

    # -- sample efficiency: TRACE from each checkpoint vs GRPO on the target ---------------------
    def _curves(self, own: TrainedRun) -> dict[str, list[dict[str, Any]]]:
        """Held-out success vs training rollouts on ``eval.curve_episodes`` seeds (the own run seed): TRACE composed
        from every adapter checkpoint (gates trained on the rollouts before it) and each GRPO-on-target baseline's
        checkpoints."""
        cfg, curves = self.cfg, {}
        iterations = sorted({v["iteration"] for t in own.trained.values() for v in t["versions"]})
        points = []
        for it in iterations:
            at = {cap: {**t, "adapter_dir": next(v["dir"] for v in t["versions"] if v["iteration"] == it)}
                  for cap, t in own.trained.items() if any(v["iteration"] == it for v in t["versions"])}
            if len(at) != len(own.trained):
                continue
            stage = f"replication/compose/at{it:04d}"
            out = self.runner.run(stage, content_hash(self.h_train, stage, asdict(cfg.compose),
                                                      self.p.moe_cfg.hash_part()),
                                  lambda d, at=at, it=it: compose_adapters(
                                      cfg, self.model, at, d, self.p.moe_cfg, before_iteration=it,
                                      gate_env=self.p.gate_env(self.envs, self.p.moe_cfg.train.method)))
            if out.get("skipped"):
                continue
            name = f"TRACE@{it}"
            spec = base_spec(cfg, self.model, name, out["composed_dir"], kind="composed")
            row = self._evaluate({name: spec}, table="curve", seed=own.seed, row=name,
                                 episodes=cfg.eval.curve_episodes)[0]
            rollouts = sum(next(v["rollouts"] for v in t["versions"] if v["iteration"] == it)
                           for t in own.trained.values()) + out.get("gate_rollouts", 0)
            points.append({"rollouts": rollouts, **row.result["overall"]})
        curves["TRACE"] = points
        for name in ("grpo_target", "grpo_target_4x"):
            baseline = own.baselines.get(name)
            if not baseline or baseline.get("checkpoint_of"):
                continue  # the 1x row taken from the 4x run: its points are the 4x curve's first ones
            points = []
            for version in baseline["versions"]:
                policy = f"{name}@{version['iteration']}"
                spec = base_spec(cfg, self.model, name=policy, adapter=version["dir"])
                row = self._evaluate({policy: spec}, table="curve", seed=own.seed, row=policy,
                                     episodes=cfg.eval.curve_episodes)[0]
                points.append({"rollouts": version["rollouts"], **row.result["overall"]})
            curves[name] = points
        return curves


def load_tables(run_dir: str | Path) -> dict[str, Any] | None:
    """``replication/tables.json`` of a run directory, or None when the run has no replication rows."""
    import json

    path = Path(run_dir) / TABLES
    return json.loads(path.read_text()) if path.exists() else None

