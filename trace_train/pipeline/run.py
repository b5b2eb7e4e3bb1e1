"""``run_pipeline``: all of TRACE on one or several target envs, one stage after another, into one run directory.

Several targets (``pipeline.target_env: [a, b]``): rollouts and analysis cover every target's train split (each
record keeps its env id), each selected capability is synthesized on every target's domain (an adapter trains on
the mixture of its envs), and evaluation reports every target's test split and all of them together."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from trace_envs.records import read_trajectories, write_json_atomic, write_trajectories
from trace_train.analysis.config import AnalysisConfig
from trace_train.pipeline.config import TRAINED_BASELINES, MoEConfig, PipelineConfig, PipelineConfigs, target_domain
from trace_train.pipeline.policy_play import base_spec, play, policy_hash_part
from trace_train.pipeline.stage_runner import StageRunner, content_hash
from trace_train.pipeline.stages import (
    base_choice_part,
    capabilities_to_synthesize,
    capability_prompt,
    checkpoint_of,
    compose_adapters,
    gate_data_part,
    grpo_run,
    resolve_base_model,
    sample_efficiency,
)
from trace_train.workers import Job, run_jobs

logger = logging.getLogger(__name__)


@dataclass
class TrainedRun:
    """What one run seed trained: ``trained`` (capability -> its GRPO stage outputs), the composed model's
    compose outputs (None when composition is off or skipped) and the trained baselines' outputs."""

    seed: int
    trained: dict[str, dict[str, Any]]
    composed: dict[str, Any] | None
    baselines: dict[str, dict[str, Any]]


@dataclass
class TrainPlan:
    """One run seed's training as jobs (their keys are the stage names) and how their results make a TrainedRun."""

    seed: int
    tag: str
    adapters: dict[str, str]  # capability -> job key
    compose: str | None
    baselines: dict[str, str]  # trained baseline -> job key, in pipeline.baselines' order
    jobs: list[Job]

    def assemble(self, results: Mapping[str, Any]) -> TrainedRun:
        trained = {cap: results[key] for cap, key in self.adapters.items()}
        composed = results.get(self.compose) if self.compose else None
        if composed and composed.get("skipped"):
            logger.warning("composition%s skipped: %s", self.tag, composed["skipped"])
            composed = None
        return TrainedRun(self.seed, trained, composed, {n: results[k] for n, k in self.baselines.items()})


class Pipeline:
    """Holds the configs of every step; ``run()`` executes (or skips) the stages in order.

    ``grpo_cfg`` trains every adapter and trained baseline as it is (iterations, groups, G, sampling);
    ``moe_cfg`` (the ``moe`` group) sets the gates of the composed model."""

    def __init__(self, cfg: PipelineConfig, bootstrap_cfg: Any, analysis_cfg: AnalysisConfig | Any,
                 synthesis_cfg: Any, grpo_cfg: Any, repo_root: Path, moe_cfg: MoEConfig | None = None):
        self.cfg, self.bootstrap_cfg, self.analysis_cfg = cfg, bootstrap_cfg, AnalysisConfig.coerce(analysis_cfg)
        self.moe_cfg = moe_cfg if moe_cfg is not None else MoEConfig()
        self.synthesis_cfg, self.grpo_cfg, self.repo_root = synthesis_cfg, grpo_cfg, repo_root
        self.run_dir = Path(cfg.run_dir).resolve()
        if cfg.replication.extra_seeds and grpo_cfg.seed in cfg.replication.extra_seeds:
            raise ValueError(f"pipeline.replication.extra_seeds {cfg.replication.extra_seeds} repeats the pipeline's "
                             f"own run seed grpo.seed={grpo_cfg.seed}")
        self.runner = StageRunner(self.run_dir, force=set(cfg.force),
                                  meta={"target_env": cfg.target_env if isinstance(cfg.target_env, str)
                                        else ", ".join(cfg.targets), "config": asdict(cfg)})

    @classmethod
    def from_configs(cls, configs: PipelineConfigs, repo_root: Path) -> Pipeline:
        c = configs
        return cls(c.pipeline, c.bootstrap, c.analysis, c.synthesis, c.grpo, repo_root, moe_cfg=c.moe)

    def run(self) -> dict[str, Any]:
        cfg, r = self.cfg, self.runner
        h = content_hash(self.bootstrap_cfg.content_hash(), cfg.base_model,
                         *base_choice_part(cfg, self.bootstrap_cfg))
        model = r.run("bootstrap", h,
                      lambda d: resolve_base_model(cfg, self.bootstrap_cfg, d, self.repo_root))["model"]
        kwargs = cfg.kwargs_by_target()
        targets = cfg.target_env if not kwargs else [cfg.target_env, kwargs]
        h = content_hash(h, asdict(cfg.rollouts), policy_hash_part(cfg), targets)
        r.run("rollouts", h, lambda d: self._rollouts(model, d))
        h = content_hash(h, asdict(self.analysis_cfg), cfg.labeler)
        selected = r.run("analysis", h, self._analysis)["selected"]
        if cfg.capabilities is not None:
            logger.info("training the configured capabilities %s (analysis selected %s)", cfg.capabilities, selected)
            selected = list(cfg.capabilities)
        to_synthesize = capabilities_to_synthesize(selected, cfg.train.max_capabilities)
        h_syn = content_hash(h, asdict(self.synthesis_cfg), to_synthesize)
        envs = r.run("synthesis", h_syn, lambda d: self._synthesis(to_synthesize, model, d))["envs"]
        self._register_emitted()
        if not envs:
            logger.warning("synthesis emitted no env to train for %s (none passed the calibration gate, or no family "
                           "or generator builds it): no adapter and no composed model; the baselines still run",
                           to_synthesize)
        h_train = content_hash(h_syn, self.grpo_cfg.hash_part(), asdict(cfg.train), policy_hash_part(cfg),
                               *cfg.grpo_overrides())
        # every run seed's adapters, composed model and trained baselines: one graph of jobs, so that with
        # pipeline.workers > 1 the replication's extra seeds train beside the pipeline's own
        extra_seeds = list(cfg.replication.extra_seeds) if cfg.replication.enabled else []
        own, *extra = self.train_runs(model, envs, h_train, [None, *extra_seeds])
        trained, composed, baselines = own.trained, own.composed, own.baselines
        trace_rollouts = sum(t["rollouts"] for t in trained.values()) + (composed or {}).get("gate_rollouts", 0)
        h_eval = content_hash(h_train, asdict(cfg.eval), sorted(trained), composed, sorted(cfg.baselines),
                              *self._baseline_overrides())
        r.run("eval", h_eval, lambda d: self._eval(model, trained, composed, baselines, trace_rollouts, d))
        h_report = content_hash(h_eval, "report")
        if cfg.replication.enabled:
            from trace_train.pipeline.replication import Replication

            tables = Replication(self, model, envs, h_train, h_eval).run(own, extra)
            h_report = content_hash(h_report, tables)
        if composed and cfg.report.routing_sample > 0:  # a stage of its own: eval's hash unchanged
            h_routing = content_hash(h_eval, "routing", asdict(cfg.report))
            r.run("routing", h_routing, lambda d: self._routing(model, composed, d))
            h_report = content_hash(h_report, h_routing)  # the report shows the trace: a new trace, a new report
        return r.run("report", h_report, self._report)

    def headline(self) -> str | None:
        """The run's one-line verdict (composed vs base on the held-out seeds), None before the eval stage."""
        import json

        from trace_train.evaluation.replication_table import headline

        path = self.run_dir / "eval" / "eval.json"
        return headline(json.loads(path.read_text())["policies"]) if path.exists() else None

    def train_run(self, model: str, envs: dict[str, Any], h_train: str, seed: int | None = None) -> TrainedRun:
        """Every adapter, the composed model and the trained baselines of one run seed (``grpo.seed`` when
        ``seed`` is None: the stages ``train/<cap>``, ``compose``, ``baselines/<name>``; another seed appends
        ``@s<seed>`` to each stage and trains with ``grpo.seed=<seed>``)."""
        return self.train_runs(model, envs, h_train, [seed])[0]

    def train_runs(self, model: str, envs: dict[str, Any], h_train: str,
                   seeds: list[int | None]) -> list[TrainedRun]:
        """``train_run`` of each seed, all their stages one graph of jobs (``pipeline.workers`` of them at once)."""
        unused = sorted(set(self.cfg.capability_grpo) - set(envs))
        if unused:
            logger.warning("pipeline.capability_grpo: no adapter is trained for %s (trained: %s); their overrides are "
                           "not used", unused, sorted(envs))
        plans = [self._train_plan(model, envs, h_train, seed) for seed in seeds]
        results = run_jobs([job for plan in plans for job in plan.jobs], self.cfg.workers)
        self.runner.refresh()
        return [plan.assemble(results) for plan in plans]

    def _train_plan(self, model: str, envs: dict[str, Any], h_train: str, seed: int | None) -> TrainPlan:
        cfg, r = self.cfg, self.runner
        grpo_cfg = self.grpo_cfg if seed is None else replace(self.grpo_cfg, seed=seed)
        tag = "" if seed is None else f"@s{seed}"
        h = h_train if seed is None else content_hash(h_train, "seed", seed)
        per_iteration = grpo_cfg.groups_per_iter * grpo_cfg.group_size
        cap_cfgs = {cap: cfg.capability_grpo_cfg(cap, grpo_cfg) for cap in envs}
        jobs = [Job(f"train/{cap}{tag}",
                    lambda done, cap=cap, env=env: r.run(f"train/{cap}{tag}", content_hash(h, cap),
                                                         lambda d: grpo_run(cfg, cap_cfgs[cap], model, env, cap, d,
                                                                            grpo_cfg.iterations)),
                    cost=grpo_cfg.iterations * per_iteration)
                for cap, env in envs.items()]
        adapters = {cap: f"train/{cap}{tag}" for cap in envs}
        if cfg.compose.enabled and envs:
            def compose(done: Mapping[str, Any]) -> dict[str, Any]:
                trained = {cap: done[key] for cap, key in adapters.items()}
                return r.run(f"compose{tag}", content_hash(h, sorted(trained), asdict(cfg.compose),
                                                           self.moe_cfg.hash_part(),
                                                           *gate_data_part(self.moe_cfg, grpo_cfg)),
                             lambda d: compose_adapters(cfg, model, trained, d, self.moe_cfg,
                                                        gate_env=self.gate_env(envs, self.moe_cfg.train.method)))
            jobs.append(Job(f"compose{tag}", compose, after=tuple(adapters.values()), cost=per_iteration))
        names = [n for n in cfg.baselines if n in TRAINED_BASELINES]
        from_4x = {"grpo_target", "grpo_target_4x"} <= set(names) and self._target_rows_alike()
        if from_4x:  # the 4x run first: the 1x row is its checkpoint
            names.remove("grpo_target_4x")
            names.insert(names.index("grpo_target"), "grpo_target_4x")
            self._check_target_checkpoint(cfg.baseline_grpo_cfg("grpo_target", grpo_cfg), len(envs))
        keys = {name: f"baselines/{name}{tag}" for name in names}
        budget = grpo_cfg.iterations * max(1, len(envs)) * per_iteration
        row_hashes: dict[str, str] = {}
        for name in names:
            override = cfg.baseline_grpo.get(name)
            h_row = content_hash(h, name, sorted(envs), *([override] if override else []))
            if from_4x and name == "grpo_target":  # a checkpoint of the 4x run: whatever retrains it redoes this
                h_row = content_hash(h_row, "from_4x", row_hashes["grpo_target_4x"])
            row_hashes[name] = h_row
            row_cfg = cfg.baseline_grpo_cfg(name, grpo_cfg)

            def train(done: Mapping[str, Any], name=name, h_row=h_row, row_cfg=row_cfg) -> dict[str, Any]:
                before = {n: done[k] for n, k in keys.items() if k in done}
                return r.run(keys[name], h_row, lambda d: self._baseline(name, model, envs, d, row_cfg, before))

            checkpoint = from_4x and name == "grpo_target"
            jobs.append(Job(keys[name], train, after=(keys["grpo_target_4x"],) if checkpoint else (),
                            cost=1 if checkpoint else budget * (4 if name == "grpo_target_4x" else 1)))
        return TrainPlan(grpo_cfg.seed, tag, adapters, f"compose{tag}" if cfg.compose.enabled and envs else None,
                         {n: keys[n] for n in cfg.baselines if n in keys}, jobs)

    @staticmethod
    def _check_target_checkpoint(row_cfg: Any, n_envs: int) -> None:
        """Before any job: the 1x GRPO-on-target row is the 4x run's checkpoint at TRACE's budget, which the 4x
        run only saves when ``checkpoint_every`` divides that budget (``checkpoint_of``)."""
        n_envs = max(1, n_envs)
        budget = row_cfg.iterations * n_envs
        if budget % row_cfg.checkpoint_every:
            raise ValueError(f"pipeline.baselines has grpo_target and grpo_target_4x: the 1x row is the 4x run's "
                             f"checkpoint at TRACE's budget, {budget} iterations ({row_cfg.iterations} x {n_envs} "
                             f"capability envs), but grpo.checkpoint_every={row_cfg.checkpoint_every} does not "
                             f"divide it; set grpo.checkpoint_every to a divisor of {budget}")

    def _target_rows_alike(self) -> bool:
        """Whether GRPO on the target at 1x and at 4x train alike, so the 1x row is the 4x run's checkpoint."""
        over = self.cfg.baseline_grpo
        return over.get("grpo_target", {}) == over.get("grpo_target_4x", {})

    def _baseline_overrides(self) -> list[Any]:
        """The per-row GRPO overrides as eval hashes see them: nothing when there are none (older runs keep
        their hashes), else the trained rows' overrides (a retrained row is evaluated again)."""
        over = {n: o for n, o in self.cfg.baseline_grpo.items() if o and n in self.cfg.baselines}
        return [{"baseline_grpo": over}] if over else []

    # -- stages ---------------------------------------------------------------------------------
    def _rollouts(self, model: str, out: Path) -> dict[str, Any]:
        c, spec = self.cfg.rollouts, base_spec(self.cfg, model)
        records, per_target = [], {}
        for env_id in self.cfg.targets:
            played = play(spec, env_id, c.split, c.episodes, c.offset, batch=c.batch_episodes,
                          env_kwargs=self.cfg.env_kwargs(env_id, c.split))
            per_target[env_id] = {"episodes": len(played),
                                  "success_rate": sum(x.success for x in played) / max(1, len(played))}
            records.extend(played)
        write_trajectories(out / "trajectories.jsonl", records)
        outputs = {"trajectories": str(out / "trajectories.jsonl"), "episodes": len(records),
                   "success_rate": sum(x.success for x in records) / max(1, len(records))}
        if self.cfg.multi_target:
            outputs["targets"] = per_target
        return outputs

    def _analysis(self, out: Path) -> dict[str, Any]:
        from trace_train.analysis.run import run_analysis

        records = read_trajectories(self.run_dir / "rollouts" / "trajectories.jsonl")
        result = run_analysis(records, self.analysis_cfg, self.cfg.labeler, out,
                              run_meta={"run_dir": str(self.run_dir)})
        names = [c.name for c in result.result.selected]
        logger.info("selected capabilities: %s", names or "none")
        return {"selected": names, "path": str(out / "selected_capabilities.json")}

    def _synthesis(self, names: list[str], model: str, out: Path) -> dict[str, Any]:
        from trace_envs.synthesis import read_selected, synthesize
        from trace_envs.synthesis.emit import SelectedCapability
        from trace_train.calibration import collector_for

        analysed = {c.name: c for c in read_selected(self.run_dir / "analysis" / "selected_capabilities.json")}
        chosen = [analysed.get(name) or SelectedCapability(name=name, description="(configured)") for name in names]
        # synthesis.policy.kind=model calibrates against the pipeline's own base policy (paper §3.4)
        collector = collector_for(self.synthesis_cfg, base_spec(self.cfg, model, name="calibration"))
        # each target's domain (τ² airline -> tau2-airline, retail -> tau2-retail, else synthesis.domain)
        domains = list(dict.fromkeys(target_domain(t, self.synthesis_cfg.domain) for t in self.cfg.targets))
        per_domain: dict[str, dict[str, str]] = {}
        failed, no_family_all = [], []
        for domain in domains:
            report = synthesize(chosen, replace(self.synthesis_cfg, domain=domain), out, source=str(self.run_dir),
                                collector=collector)
            for e in report.emitted:
                per_domain.setdefault(e["capability"], {})[domain] = e["env_id"]
            failed.extend({**f, "domain": domain} if len(domains) > 1 else f for f in report.failed)
            no_family_all.extend(n for n in report.no_family if n not in no_family_all)
        # one env per capability, or (several domains) the mixture of its envs
        envs: dict[str, Any] = {cap: (next(iter(by.values())) if len(by) == 1 else {e: 1.0 for e in by.values()})
                                for cap, by in per_domain.items()}
        llm_results = self._llm_synthesis(chosen, model, out, collector)
        # an accepted LLM env is trained (with synthesis.llm.scope=all it replaces the family's env)
        envs.update({r.capability: r.entry["env_id"] for r in llm_results if r.accepted and r.entry})
        handled = {r.capability for r in llm_results}
        no_family = [name for name in no_family_all if name not in handled]
        if no_family:
            logger.warning("no env family for %s (needs the LLM env generator); skipped", no_family)
        outputs = {"envs": envs, "no_family": no_family, "failed": failed,
                   "calibrated_with": self.synthesis_cfg.policy.kind, "llm": [r.to_dict() for r in llm_results]}
        if len(domains) > 1:
            outputs["domains"] = domains
        return outputs

    def _llm_synthesis(self, chosen: list, model: str, out: Path, collector: Any = None) -> list:
        """synthesis.generator=llm: the LLM env generator for the capabilities ``synthesis.llm.scope`` names
        (calibrated against the pipeline's base model: ``collector``, the families' calibration model, when they
        had one, so the base is loaded once; a SWE target gets SWE scenarios instead)."""
        from trace_train.calibration import collector_for
        from trace_train.synthesis.generator import run_llm_stage

        scfg = self.synthesis_cfg
        if scfg.generator != "llm":
            return []
        if collector is None:  # the families were calibrated by the scripted expert: load the base for this stage
            collector = collector_for(replace(scfg, policy=replace(scfg.policy, kind="model")),
                                      base_spec(self.cfg, model, name="calibration"))
        return run_llm_stage(chosen, scfg, out, collector, self.run_dir / "rollouts" / "trajectories.jsonl",
                             source=str(self.run_dir), target_env=self.cfg.targets[0])

    def _register_emitted(self) -> None:
        import generated_envs

        generated_envs.load(self.run_dir / "synthesis")

    def gate_env(self, envs: dict[str, Any], method: str) -> tuple[Any, dict[str, Any] | None] | None:
        """What the gates play for ``moe.train.method``: the target (``grpo_target``, ``routing_targets``), the
        capability envs' mixture (``grpo_mixture``), nothing for supervised gates."""
        if method in ("grpo_target", "routing_targets"):
            return self._target_training()
        if method == "grpo_mixture":
            flat = [e for v in envs.values() for e in ([v] if isinstance(v, str) else v)]
            return {e: 1.0 for e in dict.fromkeys(flat)}, None
        return None

    def _target_training(self) -> tuple[str | dict[str, float], dict[str, Any]]:
        """What GRPO on the target trains on: the target (or the mixture of the targets) and its env kwargs."""
        cfg, split = self.cfg, self.cfg.rollouts.split
        kwargs = [cfg.env_kwargs(t, split) for t in cfg.targets]
        if any(kw != kwargs[0] for kw in kwargs[1:]):
            raise ValueError(f"GRPO on the targets {cfg.targets} needs the same env kwargs for all of them, got "
                             f"{kwargs}; drop grpo_target/mixture from pipeline.baselines or align "
                             "pipeline.target_env_kwargs")
        env = cfg.targets[0] if not cfg.multi_target else {t: 1.0 for t in cfg.targets}
        return env, kwargs[0]

    def _baseline(self, name: str, model: str, envs: dict[str, Any], out: Path, grpo_cfg: Any,
                  done: dict[str, dict[str, Any]]) -> dict[str, Any]:
        iterations = grpo_cfg.iterations * max(1, len(envs))  # the same rollout budget as TRACE
        if name == "grpo_target" and "grpo_target_4x" in done and self._target_rows_alike():
            return checkpoint_of(done["grpo_target_4x"], iterations)
        if name in ("grpo_target", "grpo_target_4x"):  # no hints: grpo.hint_fraction is for the capability envs
            env, kwargs = self._target_training()
            iterations *= 4 if name == "grpo_target_4x" else 1
            return grpo_run(self.cfg, replace(grpo_cfg, hint_fraction=0.0), model, env, name,
                            out, iterations, env_kwargs=kwargs or None)
        mixture, _ = self.gate_env(envs, "grpo_mixture")
        if not mixture:
            env, kwargs = self._target_training()
            mode = "sft" if name == "sft" else "grpo"
            return grpo_run(self.cfg, grpo_cfg, model, env if isinstance(env, dict) else {env: 1.0}, name,
                            out, iterations, mode=mode, env_kwargs=kwargs or None)
        mode = "sft" if name == "sft" else "grpo"
        return grpo_run(self.cfg, grpo_cfg, model, mixture, name, out, iterations, mode=mode)

    def _eval(self, model: str, trained: dict, composed: dict | None, baselines: dict, trace_rollouts: int,
              out: Path) -> dict[str, Any]:
        from trace_train.evaluation.run import evaluate_policies, print_comparison

        e = self.cfg.eval
        policies = {"base": base_spec(self.cfg, model)}
        policies.update({cap: base_spec(self.cfg, model, name=cap, adapter=t["adapter_dir"])
                         for cap, t in trained.items()})
        if composed:
            policies["TRACE (composed)"] = base_spec(self.cfg, model, "TRACE (composed)", composed["composed_dir"],
                                                     kind="composed")
        policies.update({name: base_spec(self.cfg, model, name=name, adapter=b["adapter_dir"])
                         for name, b in baselines.items()})
        if "prompted" in self.cfg.baselines:
            suffix = capability_prompt(self.run_dir / "analysis" / "selected_capabilities.json", list(trained))
            policies["prompted"] = base_spec(self.cfg, model, name="prompted", system_suffix=suffix)
        policies = {name: replace(spec, greedy=e.greedy) for name, spec in policies.items()}
        if self.cfg.multi_target:
            results = self._eval_targets(policies, out)
        else:
            results = evaluate_policies(policies, self.cfg.target_env, e.split, e.episodes, e.trials, out_dir=out,
                                        batch=e.batch_episodes, workers=self.cfg.workers,
                                        env_kwargs=self.cfg.env_kwargs(self.cfg.target_env, e.split))
            print_comparison(results, title=f"held-out {self.cfg.target_env} ({e.episodes} seeds x {e.trials})")
        curves = sample_efficiency(self.cfg, model, trace_rollouts, results.get("TRACE (composed)"), baselines, out,
                                   results)
        return {"policies": {n: r["overall"] for n, r in results.items()}, "curves": list(curves["curves"])}

    def _eval_targets(self, policies: dict[str, Any], out: Path) -> dict[str, dict[str, Any]]:
        """Every policy on every target's test split (``eval/targets/<env>/``), then on all of them together
        (``eval/eval.json``: ``policies`` overall, ``targets`` per target)."""
        from trace_train.evaluation import summarize
        from trace_train.evaluation.run import evaluate_policies, print_comparison

        e = self.cfg.eval
        per_target: dict[str, dict[str, Any]] = {}
        for env_id in self.cfg.targets:
            target_dir = out / "targets" / env_id.replace("/", "__")
            per_target[env_id] = evaluate_policies(policies, env_id, e.split, e.episodes, e.trials,
                                                   env_kwargs=self.cfg.env_kwargs(env_id, e.split),
                                                   out_dir=target_dir, batch=e.batch_episodes,
                                                   workers=self.cfg.workers)
            print_comparison(per_target[env_id], title=f"held-out {env_id} ({e.episodes} seeds x {e.trials})")
        results = {}
        for name in policies:
            records = [r for env_id in self.cfg.targets
                       for r in read_trajectories(out / "targets" / env_id.replace("/", "__")
                                                  / f"trajectories_{name}.jsonl")]
            write_trajectories(out / f"trajectories_{name}.jsonl", records)
            results[name] = summarize(records, policy=name).to_dict()
        write_json_atomic(out / "eval.json", {"env": ", ".join(self.cfg.targets), "split": e.split,
                                              "episodes": e.episodes, "trials": e.trials, "policies": results,
                                              "targets": per_target})
        print_comparison(results, title=f"held-out, all {len(self.cfg.targets)} targets")
        return results

    def _routing(self, model: str, composed: dict[str, Any], out: Path) -> dict[str, Any]:
        """Per-token routing of a sample of the held-out TRACE trajectories (``routing/routing_trace.json``)."""
        from trace_moe.routing_trace import write_routing_trace

        records = self.run_dir / "eval" / "trajectories_TRACE (composed).jsonl"
        return write_routing_trace(composed["composed_dir"], records, out / "routing_trace.json",
                                   self.cfg.report.routing_sample, tokenizer_dir=model)

    def _report(self, out: Path) -> dict[str, Any]:
        from trace_train.report import build_report

        path = build_report(self.run_dir)
        logger.info("report: %s", path)
        return {"report": str(path)}
