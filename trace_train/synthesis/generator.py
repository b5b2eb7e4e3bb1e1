"""The LLM env generator (paper step 2, the generation agent), driven by any OpenAI-compatible endpoint.

Per capability: send ``prompts/env_synthesis.md`` (filled in), extract the module, validate it (static,
then the confined dynamic check of ``trace_envs.synthesis.llm.validate``), then calibrate it against the
base policy into the gate; any failure goes back to the LLM with its reason (which check, which seed,
the traceback), up to ``synthesis.llm.max_attempts`` (5) attempts. Every attempt is kept under
``<attempts_dir>/<capability>/attempt_<n>.json`` with its prompt hash, model, response and report.
An accepted module is emitted with its provenance (``trace_envs.synthesis.llm.emit_llm``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from trace_envs.atomic_io import write_text_atomic
from trace_envs.hints import envs_without_hints
from trace_envs.records import TrajectoryRecord
from trace_envs.registry import unregister_env
from trace_envs.synthesis import Collector, SelectedCapability, SynthesisConfig, calibrate_env
from trace_envs.synthesis.calibrate import GATE_EPSILON, make_trial
from trace_envs.synthesis.config import CalibrationGate
from trace_envs.synthesis.llm.emit_llm import emit_llm_env
from trace_envs.synthesis.llm.loader import ENTRY_POINT, sha256_text
from trace_envs.synthesis.llm.validate import target_tool_schemas, validate_module
from trace_train.analysis.llm_client import ChatClient
from trace_train.synthesis.attempts import Attempt, AttemptSteps, LLMCapabilityResult, run_attempts
from trace_train.synthesis.client import make_client
from trace_train.synthesis.prompt import build_messages, extract_module, retry_message

logger = logging.getLogger(__name__)


def _calibration_feedback(failures: list[str], stats: dict[str, Any], gate: CalibrationGate) -> str:
    """The gate's failures and what to change: easier / harder only when a rate is below / above its bounds; when
    the rates are inside them, the outcome varies too little within each seed's group."""
    eps = GATE_EPSILON
    rates = (("success_rate", gate.success_min, gate.success_max), ("mean_reward", gate.reward_min, gate.reward_max))
    easy = any(stats[key] > high + eps for key, _, high in rates)
    hard = any(stats[key] < low - eps for key, low, _ in rates)
    advice = []
    if easy:
        advice.append("too easy for the base agent: make the task harder (more distractors, more steps)")
    if hard:
        advice.append("too hard for the base agent: make it easier, or give partial credit for progress")
    if not advice:
        advice.append("not varied enough: the outcome depends on the seed alone (each seed is always solved or "
                      "always failed); make rollouts of one seed differ, so that the agent's own choices decide "
                      "success")
    return ("Your module passed validation, but the base agent's calibration failed the gate: "
            + "; ".join(failures) + f". It is {' and '.join(advice)}.")


def _calibrate(source_path: Path, sha: str, capability: str, cfg: SynthesisConfig, collector: Collector
               ) -> tuple[list[str], dict[str, Any]]:
    """Gate failures and statistics of the validated module played by ``collector``."""
    import gymnasium as gym

    env_id = f"trace/{capability}-llm-candidate-v0"
    unregister_env(env_id)
    gym.register(id=env_id, entry_point=ENTRY_POINT,
                 kwargs={"source": str(source_path), "sha256": sha, "domain": cfg.domain})
    try:
        if cfg.hint_fraction > 0 and envs_without_hints([env_id], {}):  # a written env has no hint to show
            logger.info("%s has no hints: calibrating all of each group unhinted", env_id)
            cfg = replace(cfg, hint_fraction=0.0)
        stats = calibrate_env(env_id, {}, collector, cfg)
    finally:
        unregister_env(env_id)
    trial = make_trial({}, stats, cfg.gate)
    return trial.failures, stats.to_dict()


def generate_env(cap: SelectedCapability, cfg: SynthesisConfig, client: ChatClient, collector: Collector,
                 out_dir: str | Path, attempts_dir: str | Path, records: list[TrajectoryRecord] | None = None,
                 source: str = "") -> LLMCapabilityResult:
    """The attempt loop for one capability (see the module docstring)."""
    llm = cfg.llm
    tools = list(target_tool_schemas(cfg.domain).values())
    messages = build_messages(cap, cfg.domain, tools, records or [], llm.n_failed_examples, llm.prompt)
    cap_dir = Path(attempts_dir) / cap.name

    def check(module: str, attempt: Attempt) -> str | None:
        attempt.module_sha256 = sha256_text(module)
        report = validate_module(module, cap.name, cfg.domain, llm.validation)
        attempt.report = {"validation": report.to_dict()}
        if not report.ok:
            attempt.stage = report.stage
            return report.feedback()
        source_path = cap_dir / f"attempt_{attempt.index}.py"
        write_text_atomic(source_path, module)
        failures, stats = _calibrate(source_path, attempt.module_sha256, cap.name, cfg, collector)
        attempt.report["calibration"] = {"stats": stats, "failures": failures}
        if failures:
            attempt.stage = "calibration"
            return _calibration_feedback(failures, stats, cfg.gate)
        attempt.stage, attempt.accepted = "accepted", True
        return None

    def provenance(attempt: Attempt) -> dict[str, Any]:
        return {"validation": attempt.report["validation"]["measured"],
                "sandbox": attempt.report["validation"]["sandbox"],
                "calibration": attempt.report["calibration"]["stats"], "passed_gate": True}

    steps = AttemptSteps(
        generator="llm", label="LLM env generator", noun="module", extract=extract_module, check=check,
        provenance=provenance, retry=retry_message,
        emit=lambda module, _attempt, prov: emit_llm_env(cap.name, cfg.domain, module, out_dir, prov))
    return run_attempts(cap, llm.max_attempts, client, messages, cap_dir, steps, source)


def synthesize_llm(selected: list[SelectedCapability], cfg: SynthesisConfig, out_dir: str | Path,
                   collector: Collector | None, records: list[TrajectoryRecord] | None = None, source: str = "",
                   client: ChatClient | None = None) -> list[LLMCapabilityResult]:
    """Run the generator for each capability; ``collector`` is the base policy (a model) for calibration."""
    if collector is None:
        raise ValueError("the LLM env generator calibrates against a model: set synthesis.policy.kind=model and "
                         "synthesis.policy.model=<base model dir> (the scripted experts cannot play an LLM-written "
                         "env)")
    client = client or make_client(cfg)
    attempts_dir = Path(out_dir) / "llm_attempts"
    return [generate_env(cap, cfg, client, collector, out_dir, attempts_dir, records, source) for cap in selected]


def llm_capabilities(selected: list[SelectedCapability], cfg: SynthesisConfig) -> list[SelectedCapability]:
    """The capabilities the LLM generator builds: none for generator=template; else per ``llm.scope``."""
    from trace_envs.families import FAMILIES

    if cfg.generator != "llm":
        return []
    return [c for c in selected if cfg.llm.scope == "all" or c.name not in FAMILIES]


def run_llm_stage(selected: list[SelectedCapability], cfg: SynthesisConfig, out_dir: str | Path,
                  collector: Collector | None, trajectories: str | Path | None = None, source: str = "",
                  target_env: str | None = None) -> list[LLMCapabilityResult]:
    """What ``trace-rl synthesize`` and the pipeline call: the LLM generator for the capabilities it owns
    (``llm_capabilities``), with failed examples from ``trajectories`` (a JSONL of the target's rollouts).

    A SWE target (``synthesis.domain=swe`` or a ``target_env`` under ``trace_envs/swe``) gets SWE scenarios
    for every selected capability instead (``trace_train.synthesis.swe_generator``; no families apply)."""
    from trace_envs.records import read_trajectories
    from trace_envs.synthesis.llm.swe_scenario import is_swe_target

    swe = cfg.generator == "llm" and is_swe_target(cfg.domain, target_env)
    chosen = list(selected) if swe else llm_capabilities(selected, cfg)
    if not chosen:
        return []
    records = read_trajectories(trajectories) if trajectories and Path(trajectories).exists() else []
    if swe:
        from trace_train.synthesis.swe_generator import synthesize_swe

        return synthesize_swe(chosen, cfg, out_dir, records, source)
    return synthesize_llm(chosen, cfg, out_dir, collector, records, source)


def check_llm_config(cfg: SynthesisConfig, collector: Collector | None) -> None:
    """Fail fast (before any template work) when ``generator=llm`` cannot run as configured."""
    from trace_envs.synthesis.llm.swe_scenario import is_swe_target

    if cfg.generator != "llm":
        return
    make_client(cfg)
    if collector is None and not is_swe_target(cfg.domain):
        synthesize_llm([], cfg, ".", None)
