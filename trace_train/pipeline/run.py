"""``run_pipeline``: all of TRACE on a target env, one stage after another, into one run directory."""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from trace_train.pipeline.config import TRAINED_BASELINES, PipelineConfig
from trace_train.pipeline.stage_runner import StageRunner, content_hash
from trace_train.pipeline.stages import (
    base_spec,
    capabilities_to_synthesize,
    capability_prompt,
    compose_adapters,
    grpo_run,
    play,
    resolve_base_model,
    sample_efficiency,
)
from trace_train.trajectory import read_trajectories, write_trajectories

logger = logging.getLogger(__name__)


class Pipeline:
    """Holds the configs of every step; ``run()`` executes (or skips) the stages in order."""

    def __init__(self, cfg: PipelineConfig, bootstrap_cfg: Any, analysis_cfg: Any, synthesis_cfg: Any,
                 grpo_cfg: Any, repo_root: Path):
        self.cfg, self.bootstrap_cfg, self.analysis_cfg = cfg, bootstrap_cfg, analysis_cfg
        self.synthesis_cfg, self.grpo_cfg, self.repo_root = synthesis_cfg, grpo_cfg, repo_root
        self.run_dir = Path(cfg.run_dir).resolve()
        self.runner = StageRunner(self.run_dir, force=set(cfg.force),
                                  meta={"target_env": cfg.target_env, "config": asdict(cfg)})

    def run(self) -> dict[str, Any]:
        cfg, r = self.cfg, self.runner
        h = content_hash(self.bootstrap_cfg.content_hash(), cfg.base_model)
        model = r.run("bootstrap", h,
                      lambda d: resolve_base_model(cfg, self.bootstrap_cfg, d, self.repo_root))["model"]
        h = content_hash(h, asdict(cfg.rollouts), asdict(cfg.policy), cfg.target_env)
        r.run("rollouts", h, lambda d: self._rollouts(model, d))
        from omegaconf import OmegaConf

        h = content_hash(h, OmegaConf.to_container(self.analysis_cfg, resolve=True), cfg.labeler)
        selected = r.run("analysis", h, self._analysis)["selected"]
        if cfg.capabilities is not None:
            logger.info("training the configured capabilities %s (analysis selected %s)", cfg.capabilities, selected)
            selected = list(cfg.capabilities)
        to_synthesize = capabilities_to_synthesize(selected, cfg.train.max_capabilities)
        h_syn = content_hash(h, asdict(self.synthesis_cfg), to_synthesize)
        envs = r.run("synthesis", h_syn, lambda d: self._synthesis(to_synthesize, model, d))["envs"]
        self._register_emitted()
        h_train = content_hash(h_syn, self.grpo_cfg.to_dict(), asdict(cfg.train), asdict(cfg.policy))
        trained = {cap: r.run(f"train/{cap}", content_hash(h_train, cap),
                              lambda d, cap=cap, env=env: grpo_run(cfg, self.grpo_cfg, model, env, cap, d,
                                                                   cfg.train.iterations))
                   for cap, env in envs.items()}
        composed = None
        if cfg.compose.enabled and trained:
            composed = r.run("compose", content_hash(h_train, sorted(trained), asdict(cfg.compose)),
                             lambda d: compose_adapters(cfg, model, trained, d))
            if composed.get("skipped"):
                logger.warning("composition skipped: %s", composed["skipped"])
                composed = None
        trace_rollouts = sum(t["rollouts"] for t in trained.values())
        baselines = {name: r.run(f"baselines/{name}", content_hash(h_train, name, sorted(envs)),
                                 lambda d, name=name: self._baseline(name, model, envs, d))
                     for name in cfg.baselines if name in TRAINED_BASELINES}
        h_eval = content_hash(h_train, asdict(cfg.eval), sorted(trained), composed, sorted(cfg.baselines))
        r.run("eval", h_eval, lambda d: self._eval(model, trained, composed, baselines, trace_rollouts, d))
        return r.run("report", content_hash(h_eval, "report"), self._report)

    # -- stages ---------------------------------------------------------------------------------
    def _rollouts(self, model: str, out: Path) -> dict[str, Any]:
        c = self.cfg.rollouts
        records = play(base_spec(self.cfg, model), self.cfg.target_env, c.split, c.episodes, c.offset,
                       batch=c.batch_episodes)
        write_trajectories(out / "trajectories.jsonl", records)
        return {"trajectories": str(out / "trajectories.jsonl"), "episodes": len(records),
                "success_rate": sum(x.success for x in records) / max(1, len(records))}

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
        report = synthesize(chosen, self.synthesis_cfg, out, source=str(self.run_dir), collector=collector)
        envs = {e["capability"]: e["env_id"] for e in report.emitted}
        if report.no_family:
            logger.warning("no env family for %s (needs the LLM env generator); skipped", report.no_family)
        return {"envs": envs, "no_family": report.no_family, "failed": report.failed,
                "calibrated_with": self.synthesis_cfg.policy.kind}

    def _register_emitted(self) -> None:
        import generated_envs

        generated_envs.load(self.run_dir / "synthesis")

    def _baseline(self, name: str, model: str, envs: dict[str, str], out: Path) -> dict[str, Any]:
        iterations = self.cfg.train.iterations * max(1, len(envs))  # the same rollout budget as TRACE
        if name == "grpo_target":  # the target has no hints: grpo.hint_fraction is for the capability envs
            return grpo_run(self.cfg, replace(self.grpo_cfg, hint_fraction=0.0), model, self.cfg.target_env, name,
                            out, iterations)
        mixture = {env: 1.0 for env in envs.values()} or {self.cfg.target_env: 1.0}
        mode = "sft" if name == "sft" else "grpo"
        return grpo_run(self.cfg, self.grpo_cfg, model, mixture, name, out, iterations, mode=mode)

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
        results = evaluate_policies(policies, self.cfg.target_env, e.split, e.episodes, e.trials, out_dir=out,
                                    batch=e.batch_episodes)
        print_comparison(results, title=f"held-out {self.cfg.target_env} ({e.episodes} seeds x {e.trials})")
        headline = results.get("TRACE (composed)") or next(iter(results.values()))
        curves = sample_efficiency(self.cfg, model, trace_rollouts, headline, baselines, out)
        return {"policies": {n: r["overall"] for n, r in results.items()}, "curves": list(curves["curves"])}

    def _report(self, out: Path) -> dict[str, Any]:
        from trace_train.report import build_report

        path = build_report(self.run_dir)
        logger.info("report: %s", path)
        return {"report": str(path)}
