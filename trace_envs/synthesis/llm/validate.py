"""Validation of an LLM-written env module: static checks, then the confined dynamic check, judged here.

Nothing of the module runs in this process. ``validate_module`` returns a ``ValidationReport`` whose
``failures`` say, in words an LLM can act on, which check failed and on which seed (with the
traceback when the module raised); ``feedback()`` is the text sent back to the generator.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.sandbox import ProbeRun, run_probe
from trace_envs.synthesis.llm.static import check_source

logger = logging.getLogger(__name__)


@dataclass
class ValidationReport:
    ok: bool
    stage: str  # "static", "dynamic" or "passed"
    failures: list[str] = field(default_factory=list)
    static: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] | None = None
    traceback: str | None = None
    sandbox: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def feedback(self) -> str:
        """The validation failure as the generator's next prompt states it."""
        lines = [f"Your module was rejected at the {self.stage} check:"] + [f"- {f}" for f in self.failures]
        if self.traceback:
            lines += ["", "Traceback (inside the sandbox):", "```", self.traceback.strip(), "```"]
        return "\n".join(lines)


@lru_cache(maxsize=8)
def _target_schemas(domain: str) -> str:
    from trace_envs.domains import get_domain

    d = get_domain(domain)
    box = d.build_tools(d.world_db(d.new_world(np.random.default_rng(0))))
    return json.dumps({s["function"]["name"]: s for s in box.schemas()}, sort_keys=True)


def target_tool_schemas(domain: str) -> dict[str, dict[str, Any]]:
    """The target's tool schemas (OpenAI function format) by name."""
    return json.loads(_target_schemas(domain))


def schema_failures(tools: list[dict[str, Any]], domain: str) -> list[str]:
    """The env's tools must be a subset of the target's, each schema unchanged."""
    target = target_tool_schemas(domain)
    out = []
    for schema in tools:
        name = schema.get("function", {}).get("name")
        if name not in target:
            out.append(f"tool {name!r} is not a tool of the target ({domain}); use the target's tools unchanged "
                       f"(available: {', '.join(sorted(target))})")
        elif json.dumps(schema, sort_keys=True) != json.dumps(target[name], sort_keys=True):
            out.append(f"the schema of tool {name!r} differs from the target's; keep its name, description and "
                       "arguments unchanged")
    if not tools:
        out.append("the env exposes no tools")
    return out


def judge(run: ProbeRun, capability: str, domain: str, limits: ValidationLimits) -> tuple[list[str], str | None]:
    """Failures (empty: passed) and the module's traceback, from a probe run."""
    if run.timed_out:
        return [f"timed out after {limits.timeout_s:g} s (wall-clock limit) during {run.last_phase}"], None
    if run.killed:
        what = "memory" if run.killed.startswith("memory") else run.killed
        return [f"killed by the sandbox's {what} limit ({limits.memory_mb} MB / {limits.max_processes} processes)"
                f" during {run.last_phase}"], None
    doc = run.report
    if doc is None:
        return [f"the sandboxed check exited with status {run.returncode} without a report during {run.last_phase}"
                + (f": {run.stderr.strip()[-500:]}" if run.stderr.strip() else "")], None
    err = doc.get("error")
    if err:
        kind = err.get("type", "")
        message = err.get("message", "")
        if kind == "MemoryError":
            message = f"the sandbox's memory limit ({limits.memory_mb} MB) was exceeded {message}".strip()
        return [f"{kind or 'error'} during {err.get('phase')}: {message}"], err.get("traceback")
    failures = schema_failures(doc.get("tools", []), domain)
    if doc.get("capability") != capability:
        failures.append(f"Env.capability is {doc.get('capability')!r}, expected {capability!r}")
    det = doc["determinism"]
    if det["nondeterministic_seeds"]:
        failures.append(f"the same seed gives different episodes (seeds {det['nondeterministic_seeds'][:5]}); "
                        "draw every random choice from the rng argument")
    if det["distinct"] < max(2, int(np.ceil(limits.min_distinct * det["seeds"]))):
        failures.append(f"different seeds give the same task ({det['distinct']} distinct of {det['seeds']} seeds)")
    pol = doc["policies"]
    oracle = pol["oracle"]
    if oracle["success_rate"] < limits.oracle_min:
        failures.append(f"the oracle solves {oracle['success_rate']:.1%} of {oracle['episodes']} seeds (needs "
                        f">= {limits.oracle_min:.0%}); failing seeds: {oracle['failed_examples']}")
    for name, label in (("null", "a do-nothing policy"), ("random", "a random-tool policy")):
        if pol[name]["mean_reward"] > limits.baseline_max:
            failures.append(f"{label} scores mean reward {pol[name]['mean_reward']:.3f} over {pol[name]['episodes']} "
                            f"seeds (must be <= {limits.baseline_max}): the verifier rewards not solving the task")
    rw = doc["rewards"]
    if rw["n_nonfinite"] or rw["min"] < 0.0 or rw["max"] > 1.0:
        failures.append(f"rewards lie outside [0, 1] (min {rw['min']}, max {rw['max']}, "
                        f"{rw['n_nonfinite']} not finite)")
    if rw["distinct"] <= 1:
        failures.append(f"the reward is constant ({rw['min']}) over all {rw['n']} episodes played")
    elif rw.get("verifier_distinct", 2) <= 1 and rw.get("n_verified", 0) > 1:
        failures.append(f"the verifier returns a constant reward ({rw['verifier_first']}) on all {rw['n_verified']} "
                        "episodes that ended normally: it does not depend on what the agent did")
    return failures, None


def validate_module(source: str, capability: str, domain: str = "retail-sim",
                    limits: ValidationLimits | None = None) -> ValidationReport:
    """Static checks, then (only if they pass) the confined dynamic check."""
    limits = limits or ValidationLimits()
    start = time.monotonic()
    static = check_source(source, limits.max_bytes, limits.max_lines)
    if not static.ok:
        return ValidationReport(False, "static", list(static.problems), static.to_dict(),
                                elapsed_s=time.monotonic() - start)
    run = run_probe(source, capability, domain, limits)
    failures, tb = judge(run, capability, domain, limits)
    measured = {k: v for k, v in (run.report or {}).items() if k not in ("tools", "module_output")} or None
    report = ValidationReport(not failures, "passed" if not failures else "dynamic", failures, static.to_dict(),
                              measured, tb, run.sandbox, time.monotonic() - start)
    logger.info("validation of %s: %s in %.1f s%s", capability, report.stage, report.elapsed_s,
                "" if report.ok else f" ({'; '.join(failures)[:300]})")
    return report
