"""The LLM env generator's SWE flavour: per capability, a SWE scenario instead of a capability env.

The LLM receives ``prompts/swe_scenario_synthesis.md`` (filled in) and answers with a scenario (a small
module, its tests, a hidden target test, an oracle patch, a PR-style description) as JSON; it is validated
(``trace_envs.synthesis.llm.swe_validate``: static checks, then the SWE local sandbox) and any failure goes
back to the LLM, up to ``synthesis.llm.max_attempts`` attempts, each kept under
``<out>/llm_attempts/<capability>/attempt_<n>.json``. An accepted scenario is emitted as a task of
``trace/<capability>-swe-v0`` (``swe_emit``). There is no calibration against the base model here (a SWE
episode is minutes of agent time); the manifest row says so (``calibration: null``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_envs.records import TrajectoryRecord
from trace_envs.synthesis import SelectedCapability, SynthesisConfig
from trace_envs.synthesis.llm.swe_emit import emit_swe_scenario, scenario_sha
from trace_envs.synthesis.llm.swe_scenario import (
    MAX_FILE_CHARS,
    MAX_FILES,
    MAX_TOTAL_CHARS,
    SWE_ALLOWED_IMPORTS,
    check_scenario,
    extract_json,
)
from trace_envs.synthesis.llm.swe_validate import validate_scenario
from trace_train.analysis.llm_client import ChatClient
from trace_train.paths import PROMPTS_DIR
from trace_train.synthesis.attempts import Attempt, AttemptSteps, LLMCapabilityResult, run_attempts
from trace_train.synthesis.client import make_client
from trace_train.synthesis.prompt import _stats, _trajectory_text, failed_examples, fill_messages

SYSTEM = ("You are an expert Python engineer who writes SWE-bench-style training tasks for coding agents. "
          "Answer with one JSON object in a fenced ```json block.")


def default_prompt_path() -> Path:
    return PROMPTS_DIR / "swe_scenario_synthesis.md"


def build_swe_messages(cap: SelectedCapability, records: list[TrajectoryRecord], n_examples: int,
                       template_path: str | Path | None = None) -> list[dict[str, str]]:
    """The first request: the capability, a few failed SWE trajectories, the scenario format and its rules."""
    template = Path(template_path or default_prompt_path()).read_text(encoding="utf-8")
    examples = failed_examples(cap, records, n_examples)
    fields = {"capability": cap.name, "description": cap.description or "(no description)", "stats": _stats(cap),
              "failed_trajectories": "\n\n".join(_trajectory_text(r) for r in examples) or "(none available)",
              "max_files": MAX_FILES, "max_file_chars": MAX_FILE_CHARS, "max_total_chars": MAX_TOTAL_CHARS,
              "allowed_imports": ", ".join(sorted(m for m in SWE_ALLOWED_IMPORTS if m != "pytest"))}
    return fill_messages(SYSTEM, template, fields)


def _retry(feedback: str) -> dict[str, str]:
    return {"role": "user", "content": feedback + "\n\nFix it and answer with the complete corrected scenario as "
                                                  "one JSON object in a fenced ```json block."}


def generate_scenario(cap: SelectedCapability, cfg: SynthesisConfig, client: ChatClient, out_dir: str | Path,
                      records: list[TrajectoryRecord] | None = None, source: str = "") -> LLMCapabilityResult:
    """The attempt loop for one capability (see the module docstring)."""
    llm = cfg.llm
    messages = build_swe_messages(cap, records or [], llm.n_failed_examples)
    cap_dir = Path(out_dir) / "llm_attempts" / cap.name

    def check(doc: dict, attempt: Attempt) -> str | None:
        attempt.module_sha256 = scenario_sha_of(doc)
        report = validate_scenario(doc, llm.validation)
        attempt.report = {"validation": report.to_dict()}
        attempt.stage = "accepted" if report.ok else report.stage
        attempt.accepted = report.ok
        return None if report.ok else report.feedback()

    def provenance(attempt: Attempt) -> dict[str, Any]:
        report = attempt.report["validation"]
        return {"validation": {"before": report["before"], "after": report["after"],
                               "elapsed_s": report["elapsed_s"]},
                "sandbox": report["sandbox"], "calibration": None}

    def emit(doc: dict, attempt: Attempt, prov: dict[str, Any]) -> dict[str, Any]:
        scenario = check_scenario(doc).scenario
        assert scenario is not None
        return emit_swe_scenario(cap.name, scenario, attempt.report["validation"]["pass_to_pass"], out_dir, prov)

    steps = AttemptSteps(generator="llm-swe", label="SWE scenario generator", noun="scenario", extract=extract_json,
                         check=check, provenance=provenance, emit=emit, retry=_retry)
    return run_attempts(cap, llm.max_attempts, client, messages, cap_dir, steps, source)


def scenario_sha_of(doc: dict) -> str | None:
    """The scenario's sha256 when it passes the static checks, else that of its raw JSON."""
    checked = check_scenario(doc)
    if checked.scenario is not None:
        return scenario_sha(checked.scenario)
    import hashlib

    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def synthesize_swe(selected: list[SelectedCapability], cfg: SynthesisConfig, out_dir: str | Path,
                   records: list[TrajectoryRecord] | None = None, source: str = "",
                   client: ChatClient | None = None) -> list[LLMCapabilityResult]:
    """Run the SWE scenario generator for each capability."""
    client = client or make_client(cfg)
    return [generate_scenario(cap, cfg, client, out_dir, records, source) for cap in selected]
