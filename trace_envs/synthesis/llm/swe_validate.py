"""Validation of an LLM-written SWE scenario: static checks (``swe_scenario``), then the SWE local sandbox.

The scenario is written as a swebench task (``trace_envs.swe.local_tasks.write_task``) into a private
temporary task repo and graded twice by the SWE env's own local backend (a confined checkout per run, the
sandbox's time, memory, file-size and process limits): once with no patch, once with the oracle patch.
The hidden target tests must fail before and pass after; every visible test of the module must pass
before; no test that passed before may fail after. The tests that pass both times become PASS_TO_PASS.
Nothing of the scenario runs in this process.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.confinement import available, make_report
from trace_envs.swe.gitobj import make_patch
from trace_envs.swe.grading import EvalResult, tests_report
from trace_envs.swe.local_tasks import write_config, write_task
from trace_envs.swe.patches import DEFAULT_TEST_CMD
from trace_envs.swe.sandbox import SandboxLimits
from trace_envs.swe.task import SWETask, load_task_repo
from trace_envs.synthesis.llm.config import ValidationLimits
from trace_envs.synthesis.llm.swe_scenario import SWEScenario, check_scenario

logger = logging.getLogger(__name__)
_PASSING = ("PASSED", "XPASS")
SWE_MEMORY_MB = 2048  # pytest in the SWE sandbox needs more address space than a capability-env probe


@dataclass
class SWEValidationReport:
    ok: bool
    stage: str  # "static", "dynamic" or "passed"
    failures: list[str] = field(default_factory=list)
    before: dict[str, str] = field(default_factory=dict)  # status map without a patch
    after: dict[str, str] = field(default_factory=dict)   # status map with the oracle patch
    pass_to_pass: list[str] = field(default_factory=list)
    sandbox: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def feedback(self) -> str:
        lines = [f"Your scenario was rejected at the {self.stage} check:"] + [f"- {f}" for f in self.failures]
        if self.log_tail:
            lines += ["", "The end of the test log (inside the sandbox):", "```", self.log_tail.strip(), "```"]
        return "\n".join(lines)


def test_command(scenario: SWEScenario) -> str:
    """The eval's pytest command: the module's visible tests, then (appended by the eval) the hidden ones."""
    return " ".join([DEFAULT_TEST_CMD, *scenario.visible_tests()])


def write_scenario_task(scenario: SWEScenario, root: Path, instance_id: str, pass_to_pass: list[str],
                        extra: dict[str, Any] | None = None, task_dir: Path | None = None) -> Path:
    """The scenario as one task of the swebench task repo ``root`` (``root/tasks/<instance_id>``, or ``task_dir``:
    a temporary folder published there afterwards)."""
    write_config(root)
    fixed = {**scenario.files, **scenario.fixed_files()}
    return write_task(task_dir or root / "tasks" / instance_id, instance_id, f"llm/{scenario.name}",
                      scenario.problem_statement, scenario.files, fixed, scenario.target_tests,
                      scenario.fail_to_pass, pass_to_pass, extra=extra, test_cmd=test_command(scenario))


def oracle_patch(scenario: SWEScenario) -> str:
    return make_patch(scenario.files, scenario.fixed_files())


def _sandbox_limits(limits: ValidationLimits) -> SandboxLimits:
    return SandboxLimits(timeout_s=limits.timeout_s, memory_mb=max(limits.memory_mb, SWE_MEMORY_MB),
                         file_size_mb=limits.file_size_mb, max_output_chars=200_000,
                         max_processes=max(limits.max_processes, 16))


def _grade(task: SWETask, patch: str, sandbox: SandboxLimits, timeout_s: float) -> EvalResult:
    backend = LocalBackend(sandbox, eval_timeout_s=timeout_s)
    try:
        backend.start(task)
        return backend.evaluate(patch)
    finally:
        backend.close()


def _judge(sc: SWEScenario, before: EvalResult, after: EvalResult) -> tuple[list[str], list[str]]:
    """Failures and the PASS_TO_PASS list, from the two graded runs."""
    out: list[str] = []
    for name, res in (("before the oracle patch", before), ("after the oracle patch", after)):
        if not res.patch_applied:
            out.append(f"the tests gave no results {name} ({res.error or 'the patch did not apply'}); a target test "
                       "file that fails to import stops pytest at collection: import only names that exist at base")
    if out:
        return out, []
    b, a = before.status_map, after.status_map
    for node in sc.fail_to_pass:
        if b.get(node) in _PASSING:
            out.append(f"target test {node} already passes before the oracle patch; it must fail on the bug")
        if a.get(node) not in _PASSING:
            out.append(f"target test {node} does not pass after the oracle patch (status {a.get(node, 'not run')})")
    visible = [k for k in b if k.split("::")[0] in sc.visible_tests()]
    if not visible:
        out.append("no test of the module's own test files ran")
    out += [f"test {k} of the module fails before the oracle patch ({b[k]}); the base tests must pass"
            for k in visible if b[k] not in _PASSING]
    targets = set(sc.fail_to_pass)
    broken = [k for k, v in b.items() if v in _PASSING and k not in targets and a.get(k) not in _PASSING]
    out += [f"the oracle patch breaks test {k} (passes before, {a.get(k, 'not run')} after)" for k in broken]
    p2p = sorted(k for k, v in b.items() if v in _PASSING and a.get(k) in _PASSING and k not in targets)
    if not out and tests_report(a, sc.fail_to_pass, p2p).resolution != "RESOLVED_FULL":
        out.append("the oracle patch does not resolve the task under the SWE grader")
    return out, p2p


def validate_scenario(doc: dict[str, Any], limits: ValidationLimits | None = None) -> SWEValidationReport:
    """Static checks, then (only if they pass) the two sandboxed gradings."""
    limits = limits or ValidationLimits()
    start = time.monotonic()
    static = check_scenario(doc)
    if not static.ok or static.scenario is None:
        return SWEValidationReport(False, "static", static.problems, elapsed_s=time.monotonic() - start)
    sc = static.scenario
    sandbox = _sandbox_limits(limits)
    report = make_report(available(), False, sandbox.memory_mb, sandbox.max_processes).as_dict()
    tmp = Path(tempfile.mkdtemp(prefix="trace-swe-scenario-"))
    try:
        write_scenario_task(sc, tmp, "candidate", [])
        (task,) = load_task_repo(tmp)
        before = _grade(task, "", sandbox, limits.timeout_s)
        after = _grade(task, oracle_patch(sc), sandbox, limits.timeout_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    failures, p2p = _judge(sc, before, after)
    tail = "" if not failures else (after.log if any("after" in f for f in failures) else before.log)[-3000:]
    out = SWEValidationReport(not failures, "passed" if not failures else "dynamic", failures, before.status_map,
                              after.status_map, p2p, report, tail, time.monotonic() - start)
    logger.info("validation of SWE scenario %s: %s in %.1f s%s", sc.name, out.stage, out.elapsed_s,
                "" if out.ok else f" ({'; '.join(failures)[:300]})")
    return out
