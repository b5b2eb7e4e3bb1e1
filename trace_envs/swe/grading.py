"""FAIL_TO_PASS / PASS_TO_PASS grading of a test log, with swebench 5.x semantics (no swebench import).

A log is what an eval script prints: anything, then ``>>>>> Start Test Output``, the test runner's
``pytest -rA`` output, ``>>>>> End Test Output`` and ``>>>>> Test Exit Code: N``. Rules (as swebench's
``get_logs_eval`` / ``get_eval_tests_report`` / ``get_resolution_status``):

* a bad marker (patch apply failed, reset failed, tests errored, timed out) or missing start/end
  markers -> no results, not applied;
* no parsed results -> no results (``pytest -rA`` reports every test it ran);
* a non-zero recorded exit code while the log reports no FAILED/ERROR -> no results (anti-spoofing);
* a start, end or exit-code marker line printed more than once -> no results (anti-spoofing: code under test
  can write to the eval script's own stdout, e.g. through ``/proc/$PPID/fd/1``, before or after pytest's
  summary; swebench would read the first exit code and slice at the first end marker);
* a test reported with two different statuses counts as FAILED (anti-spoofing; swebench keeps the last line);
* F2P succeeds iff PASSED or XFAIL; fails iff FAILED, ERROR, SKIPPED or absent;
* P2P is maintained iff PASSED, XFAIL or SKIPPED; fails iff FAILED, ERROR or absent;
* resolved iff every F2P and every P2P test succeeds (an empty list counts as all passing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
BAD_MARKERS = (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)
STATUSES = ("FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL")
_PASSING = ("PASSED", "XFAIL")
_EXIT_RE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")
_EXIT_LINE = re.compile(rf"^{re.escape(TEST_EXIT_CODE)}:\s*-?\d+\s*$", re.M)
_SKIP_COUNT = re.compile(r"^\[\d+\]$")


def _status_lines(log: str) -> Iterator[tuple[str, str]]:
    """``(node_id, STATUS)`` of every ``pytest -rA`` short-summary line of ``log``, in order."""
    for line in log.split("\n"):
        if not line.startswith(STATUSES):
            continue
        if line.startswith("FAILED"):
            line = line.replace(" - ", " ")
        parts = line.split()
        if len(parts) <= 1:
            continue
        if parts[0] == "SKIPPED" and _SKIP_COUNT.match(parts[1]):
            continue
        yield parts[1], parts[0]


def parse_pytest_log(log: str) -> dict[str, str]:
    """``pytest -rA`` short-summary lines (``STATUS node_id``) -> ``{node_id: STATUS}`` (the last line wins)."""
    return dict(_status_lines(log))


def conflicting_statuses(log: str) -> list[str]:
    """Tests the log reports with two different statuses. pytest prints one short-summary line per test; code
    under test that prints more (an ``atexit`` handler writing ``PASSED <id>`` after pytest's own ``FAILED <id>``,
    then ``os._exit(0)``) would win with swebench's last-line-wins parser. Here such a test counts as failed."""
    seen: dict[str, set[str]] = {}
    for node, status in _status_lines(log):
        seen.setdefault(node, set()).add(status)
    return sorted(node for node, statuses in seen.items() if len(statuses) > 1)


def exit_code_of(log: str) -> int | None:
    match = _EXIT_RE.search(log)
    return int(match.group(1)) if match else None


def repeated_markers(log: str) -> list[str]:
    """Marker lines the log holds more than once (the eval script prints each once; ``set -x`` trace lines, which
    start with ``+``, do not count)."""
    lines = [line.rstrip() for line in log.split("\n")]
    repeated = [m for m in (START_TEST_OUTPUT, END_TEST_OUTPUT) if lines.count(m) > 1]
    if len(_EXIT_LINE.findall(log)) > 1:
        repeated.append(TEST_EXIT_CODE)
    return repeated


def status_map_from_log(log: str) -> tuple[dict[str, str], bool]:
    """``(status_map, found)``; ``found`` is False when the log cannot be trusted (see module doc)."""
    if any(marker in log for marker in BAD_MARKERS):
        return {}, False
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log or repeated_markers(log):
        return {}, False
    sliced = log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    status_map = parse_pytest_log(sliced) or parse_pytest_log(log)
    if not status_map:  # pytest -rA prints a line per test: nothing parsed means nothing ran
        return {}, False
    for node in conflicting_statuses(sliced if START_TEST_OUTPUT in log else log):
        status_map[node] = "FAILED"  # a PASSED line printed after the real FAILED one (e.g. by an atexit hook)
    code = exit_code_of(log)
    if code not in (None, 0) and status_map and not any(s in ("FAILED", "ERROR") for s in status_map.values()):
        return {}, False
    return status_map, True


def _resolve(case: str, sm: dict[str, str]) -> str | None:
    """Status-map key for ``case``; prefix match only for truncated parametrized ids."""
    if case in sm:
        return case
    if case.count("[") > case.count("]"):
        matches = [k for k in sm if k.startswith(case)]
        if matches and len({sm[k] in _PASSING for k in matches}) == 1:
            return matches[0]
    return None


def _passed(case: str, sm: dict[str, str]) -> bool:
    key = _resolve(case, sm)
    return key is not None and sm[key] in _PASSING


def _maintained(case: str, sm: dict[str, str]) -> bool:
    key = _resolve(case, sm)
    return key is not None and sm[key] in (*_PASSING, "SKIPPED")


@dataclass
class TestsReport:
    """Per-test breakdown, shaped like swebench's ``tests_status``."""

    f2p_success: list[str] = field(default_factory=list)
    f2p_failure: list[str] = field(default_factory=list)
    p2p_success: list[str] = field(default_factory=list)
    p2p_failure: list[str] = field(default_factory=list)

    @property
    def f2p_rate(self) -> float:
        total = len(self.f2p_success) + len(self.f2p_failure)
        return 1.0 if total == 0 else len(self.f2p_success) / total

    @property
    def p2p_rate(self) -> float:
        total = len(self.p2p_success) + len(self.p2p_failure)
        return 1.0 if total == 0 else len(self.p2p_success) / total

    @property
    def resolution(self) -> str:
        if self.f2p_rate == 1 and self.p2p_rate == 1:
            return "RESOLVED_FULL"
        if 0 < self.f2p_rate < 1 and self.p2p_rate == 1:
            return "RESOLVED_PARTIAL"
        return "RESOLVED_NO"

    def as_swebench(self) -> dict[str, dict[str, list[str]]]:
        return {
            "FAIL_TO_PASS": {"success": list(self.f2p_success), "failure": list(self.f2p_failure)},
            "PASS_TO_PASS": {"success": list(self.p2p_success), "failure": list(self.p2p_failure)},
        }


def tests_report(status_map: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str]) -> TestsReport:
    """Grade a status map against the gold F2P / P2P lists (``pass_and_fail`` eval type)."""
    report = TestsReport()
    for case in fail_to_pass:
        (report.f2p_success if _passed(case, status_map) else report.f2p_failure).append(case)
    for case in pass_to_pass:
        (report.p2p_success if _maintained(case, status_map) else report.p2p_failure).append(case)
    return report


@dataclass
class EvalResult:
    """One graded evaluation: the swebench-style report plus the raw log."""

    instance_id: str
    resolved: bool
    patch_exists: bool
    patch_applied: bool
    report: TestsReport
    status_map: dict[str, str]
    log: str = ""
    error: str = ""
    dropped: list[str] = field(default_factory=list)  # chunks of the submission refused before grading

    def as_swebench(self) -> dict[str, Any]:
        """The ``{instance_id: {...}}`` dict ``swebench.harness.grading.get_eval_report`` returns."""
        entry: dict[str, Any] = {
            "patch_is_None": False,
            "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.patch_applied,
            "resolved": self.resolved,
        }
        if self.patch_applied:
            entry["tests_status"] = self.report.as_swebench()
        return {self.instance_id: entry}

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary for ``info``."""
        return {
            "resolved": self.resolved,
            "resolution": self.report.resolution if self.patch_applied else "RESOLVED_NO",
            "patch_exists": self.patch_exists,
            "patch_applied": self.patch_applied,
            "f2p_rate": self.report.f2p_rate if self.patch_applied else 0.0,
            "p2p_rate": self.report.p2p_rate if self.patch_applied else 0.0,
            "tests_status": self.report.as_swebench(),
            "status_map": dict(self.status_map),
            "error": self.error,
            "dropped_chunks": list(self.dropped),
        }


def grade_log(instance_id: str, log: str, fail_to_pass: list[str], pass_to_pass: list[str],
              patch: str | None = "x") -> EvalResult:
    """Grade an eval log like ``get_eval_report`` (``patch=None`` -> nothing to grade)."""
    if patch is None:
        return EvalResult(instance_id, False, False, False, TestsReport(), {}, log)
    status_map, found = status_map_from_log(log)
    if not found:
        failed = TestsReport(f2p_failure=list(fail_to_pass), p2p_failure=list(pass_to_pass))
        return EvalResult(instance_id, False, True, False, failed, {}, log, error="no trustworthy test results")
    report = tests_report(status_map, fail_to_pass, pass_to_pass)
    return EvalResult(instance_id, report.resolution == "RESOLVED_FULL", True, True, report, status_map, log)
