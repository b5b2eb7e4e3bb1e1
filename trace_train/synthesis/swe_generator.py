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
import logging
import time
from dataclasses import asdict
from pathlib import Path

from trace_envs.records import TrajectoryRecord, write_json_atomic
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
from trace_train.analysis.llm_client import ChatClient, LLMError
from trace_train.paths import PROMPTS_DIR
from trace_train.synthesis.generator import Attempt, LLMCapabilityResult, make_client
from trace_train.synthesis.prompt import _stats, _trajectory_text, failed_examples, prompt_hash

logger = logging.getLogger(__name__)
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
    text = template
    for key, value in fields.items():
        text = text.replace("{{" + key + "}}", str(value))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def _retry(feedback: str) -> dict[str, str]:
    return {"role": "user", "content": feedback + "\n\nFix it and answer with the complete corrected scenario as "
                                                  "one JSON object in a fenced ```json block."}


def generate_scenario(cap: SelectedCapability, cfg: SynthesisConfig, client: ChatClient, out_dir: str | Path,
                      records: list[TrajectoryRecord] | None = None, source: str = "") -> LLMCapabilityResult:
    """The attempt loop for one capability (see the module docstring)."""
    llm = cfg.llm
    messages = build_swe_messages(cap, records or [], llm.n_failed_examples)
    cap_dir = Path(out_dir) / "llm_attempts" / cap.name
    result = LLMCapabilityResult(cap.name, False, "no attempt made")
    for index in range(1, llm.max_attempts + 1):
        start = time.monotonic()
        attempt = Attempt(index, prompt_hash(messages), client.model, client.endpoint, "", None, "llm")
        try:
            attempt.response = client.complete(messages, seed=index)
        except LLMError as exc:
            attempt.report = {"error": str(exc)}
            result.attempts.append(attempt)
            _save(cap_dir, attempt, messages)
            result.reason = f"the LLM endpoint failed: {exc}"
            logger.error("SWE scenario generator, %s: %s", cap.name, result.reason)
            return result
        feedback, report = None, None
        try:
            doc = extract_json(attempt.response)
        except ValueError as exc:
            attempt.stage, attempt.report = "extract", {"failures": [str(exc)]}
            feedback = f"Your answer was rejected: {exc}."
        else:
            attempt.module_sha256 = scenario_sha_of(doc)
            report = validate_scenario(doc, llm.validation)
            attempt.report = {"validation": report.to_dict()}
            attempt.stage = "accepted" if report.ok else report.stage
            attempt.accepted = report.ok
            feedback = None if report.ok else report.feedback()
        attempt.elapsed_s = time.monotonic() - start
        result.attempts.append(attempt)
        _save(cap_dir, attempt, messages)
        logger.info("SWE scenario generator, %s attempt %d/%d: %s", cap.name, index, llm.max_attempts, attempt.stage)
        if attempt.accepted and report is not None:
            scenario = check_scenario(doc).scenario
            assert scenario is not None
            provenance = {"generator": "llm-swe", "model": client.model, "base_url": client.endpoint,
                          "accepted_attempt": index, "attempts": len(result.attempts),
                          "prompt_sha256": [a.prompt_sha256 for a in result.attempts],
                          "validation": {"before": report.before, "after": report.after,
                                         "elapsed_s": report.elapsed_s},
                          "sandbox": report.sandbox, "calibration": None, "attempts_dir": str(cap_dir),
                          "source_run": source, "description": cap.description}
            result.entry = emit_swe_scenario(cap.name, scenario, report.pass_to_pass, out_dir, provenance)
            result.accepted, result.reason = True, f"accepted on attempt {index}"
            return result
        messages = [*messages, {"role": "assistant", "content": attempt.response}, _retry(feedback or "")]
    last = result.attempts[-1]
    failures = last.report.get("validation", {}).get("failures") or last.report.get("failures") or []
    result.reason = (f"no scenario accepted in {llm.max_attempts} attempts; last failure at {last.stage}: "
                     + "; ".join(failures)[:500])
    logger.warning("SWE scenario generator, %s: %s", cap.name, result.reason)
    return result


def scenario_sha_of(doc: dict) -> str | None:
    """The scenario's sha256 when it passes the static checks, else that of its raw JSON."""
    checked = check_scenario(doc)
    if checked.scenario is not None:
        return scenario_sha(checked.scenario)
    import hashlib

    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _save(cap_dir: Path, attempt: Attempt, messages: list[dict[str, str]]) -> None:
    write_json_atomic(cap_dir / f"attempt_{attempt.index}.json", {**asdict(attempt), "prompt": messages})


def synthesize_swe(selected: list[SelectedCapability], cfg: SynthesisConfig, out_dir: str | Path,
                   records: list[TrajectoryRecord] | None = None, source: str = "",
                   client: ChatClient | None = None) -> list[LLMCapabilityResult]:
    """Run the SWE scenario generator for each capability."""
    client = client or make_client(cfg)
    return [generate_scenario(cap, cfg, client, out_dir, records, source) for cap in selected]
