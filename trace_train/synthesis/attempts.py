"""The LLM generators' attempt loop (capability envs in ``generator``, SWE scenarios in ``swe_generator``).

Per capability: ask the LLM, extract the artefact from its answer, check it; a failure goes back to the LLM
with its reason, up to ``max_attempts`` attempts, each kept as ``<cap_dir>/attempt_<n>.json`` (its prompt
hash, model, response and report). What differs between the generators is passed in as :class:`AttemptSteps`.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.records import write_json_atomic
from trace_envs.synthesis import SelectedCapability
from trace_train.analysis.llm_client import ChatClient, InvalidAnswer, LLMError
from trace_train.synthesis.prompt import prompt_hash

logger = logging.getLogger(__name__)


@dataclass
class Attempt:
    index: int
    prompt_sha256: str
    model: str
    base_url: str
    response: str
    module_sha256: str | None
    stage: str  # where it stopped: llm, extract, static, dynamic, calibration, accepted
    report: dict[str, Any] = field(default_factory=dict)
    accepted: bool = False
    elapsed_s: float = 0.0


@dataclass
class LLMCapabilityResult:
    capability: str
    accepted: bool
    reason: str
    attempts: list[Attempt] = field(default_factory=list)
    entry: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"capability": self.capability, "accepted": self.accepted, "reason": self.reason,
                "attempts": [{k: v for k, v in asdict(a).items() if k != "response"} for a in self.attempts],
                "env_id": self.entry["env_id"] if self.entry else None}


@dataclass(frozen=True)
class AttemptSteps:
    """The generator-specific steps of :func:`run_attempts`.

    ``extract(response)`` is the artefact (``ValueError``: the answer is rejected); ``check(artefact, attempt)``
    fills the attempt's ``module_sha256``, ``report``, ``stage`` and ``accepted`` and returns the feedback for
    the LLM (None once accepted); ``provenance(attempt)`` is the generator's part of an accepted artefact's
    provenance, ``emit(artefact, attempt, provenance)`` writes it and returns its manifest entry; ``retry(feedback)``
    is the next user message after a failure.
    """

    generator: str  # the provenance's "generator"
    label: str  # the log lines' subject
    noun: str  # what is accepted, for the final reason
    extract: Callable[[str], Any]
    check: Callable[[Any, Attempt], str | None]
    provenance: Callable[[Attempt], dict[str, Any]]
    emit: Callable[[Any, Attempt, dict[str, Any]], dict[str, Any]]
    retry: Callable[[str], dict[str, str]]


def run_attempts(cap: SelectedCapability, max_attempts: int, client: ChatClient, messages: list[dict[str, str]],
                 cap_dir: Path, steps: AttemptSteps, source: str = "") -> LLMCapabilityResult:
    """The attempt loop for one capability (see the module docstring)."""
    result = LLMCapabilityResult(cap.name, False, "no attempt made")
    for index in range(1, max_attempts + 1):
        start = time.monotonic()
        attempt = Attempt(index, prompt_hash(messages), client.model, client.endpoint, "", None, "llm")
        rejected: ValueError | None = None
        try:
            attempt.response = client.complete(messages, seed=index)
        except InvalidAnswer as exc:  # e.g. an empty answer: an attempt that failed at extraction, not the end
            attempt.response, rejected = exc.content or "", exc
        except LLMError as exc:
            attempt.report = {"error": str(exc)}
            result.attempts.append(attempt)
            save_attempt(cap_dir, attempt, messages)
            result.reason = f"the LLM endpoint failed: {exc}"
            logger.error("%s, %s: %s", steps.label, cap.name, result.reason)
            return result
        try:
            if rejected is not None:
                raise rejected
            artefact = steps.extract(attempt.response)
            _check_encodable(artefact)
        except ValueError as exc:
            attempt.stage, attempt.report = "extract", {"failures": [str(exc)]}
            feedback: str | None = f"Your answer was rejected: {exc}."
        else:
            try:
                feedback = steps.check(artefact, attempt)
            except Exception as exc:  # noqa: BLE001 - whatever the answer makes the checks raise fails this attempt
                logger.warning("%s, %s attempt %d: the checks raised on the answer", steps.label, cap.name, index,
                               exc_info=True)
                message = f"checking it raised {type(exc).__name__}: {exc}"
                attempt.stage, attempt.report = "check", {"failures": [message],
                                                          "traceback": traceback.format_exc()[-4000:]}
                feedback = f"Your answer was rejected: {message}."
        attempt.elapsed_s = time.monotonic() - start
        result.attempts.append(attempt)
        save_attempt(cap_dir, attempt, messages)
        logger.info("%s, %s attempt %d/%d: %s", steps.label, cap.name, index, max_attempts, attempt.stage)
        if attempt.accepted:
            provenance = {"generator": steps.generator, "model": client.model, "base_url": client.endpoint,
                          "accepted_attempt": index, "attempts": len(result.attempts),
                          "prompt_sha256": [a.prompt_sha256 for a in result.attempts],
                          **steps.provenance(attempt),
                          "attempts_dir": str(cap_dir), "source_run": source, "description": cap.description}
            result.entry = steps.emit(artefact, attempt, provenance)
            result.accepted, result.reason = True, f"accepted on attempt {index}"
            return result
        # the conversation goes on with text UTF-8 can carry (a lone surrogate becomes U+FFFD)
        said = attempt.response.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        messages = [*messages, {"role": "assistant", "content": said}, steps.retry(feedback or "")]
    last = result.attempts[-1]
    result.reason = f"no {steps.noun} accepted in {max_attempts} attempts; last failure at {last.stage}: " + \
        "; ".join(attempt_failures(last))[:500]
    logger.warning("%s, %s: %s", steps.label, cap.name, result.reason)
    return result


def _check_encodable(artefact: Any) -> None:
    """An answer holding text UTF-8 cannot encode (a lone surrogate such as ``\\ud800``, which JSON escapes
    decode to) fails extraction: nothing downstream (hashing, parsing, writing) could take it."""
    try:
        json.dumps(artefact, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        raise ValueError(f"it holds text UTF-8 cannot encode ({bad!r}, a lone surrogate)") from None


def attempt_failures(attempt: Attempt) -> list[str]:
    """Why ``attempt`` failed: its calibration's, else its validation's, else its extraction's failures."""
    rep = attempt.report
    if "calibration" in rep:
        return rep["calibration"]["failures"]
    if "validation" in rep:
        return rep["validation"]["failures"]
    return rep.get("failures", [rep.get("error", "")])


def save_attempt(cap_dir: Path, attempt: Attempt, messages: list[dict[str, str]]) -> None:
    write_json_atomic(cap_dir / f"attempt_{attempt.index}.json", {**asdict(attempt), "prompt": messages})
