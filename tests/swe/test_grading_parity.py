"""Grading parity with swebench's own functions on saved logs (no Docker: logs are fed to both graders)."""

from __future__ import annotations

import pytest

from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.grading import grade_log, parse_pytest_log

grading = pytest.importorskip("swebench.harness.grading", reason="swebench is not installed (extra `swe`)")
from swebench.harness.utils import make_test_spec  # noqa: E402

F2P = ["tests/test_x.py::test_fix", "tests/test_x.py::test_param[a-1]"]
P2P = ["tests/test_x.py::test_old", "tests/test_y.py::test_other"]


def _log(lines: list[str], exit_code: int | None = 0, start: bool = True, end: bool = True, extra: str = "") -> str:
    parts = ["+ git apply -v -", "Applied patch tests/test_x.py cleanly."]
    if start:
        parts.append(">>>>> Start Test Output")
    parts += ["============ test session starts ============", *lines, "========= short test summary info ========="]
    if end:
        parts.append(">>>>> End Test Output")
    if exit_code is not None:
        parts.append(f">>>>> Test Exit Code: {exit_code}")
    return "\n".join(parts) + "\n" + extra


ALL_PASS = ["PASSED tests/test_x.py::test_fix", "PASSED tests/test_x.py::test_param[a-1]",
            "PASSED tests/test_x.py::test_old", "PASSED tests/test_y.py::test_other"]
CASES = {
    "resolved": _log(ALL_PASS),
    "partial": _log(["PASSED tests/test_x.py::test_fix", "FAILED tests/test_x.py::test_param[a-1] - assert 1 == 2",
                     *ALL_PASS[2:]], exit_code=1),
    "unresolved": _log(["FAILED tests/test_x.py::test_fix - AssertionError", "FAILED tests/test_x.py::test_param[a-1]",
                        *ALL_PASS[2:]], exit_code=1),
    "p2p_broken": _log([*ALL_PASS[:2], "ERROR tests/test_x.py::test_old - fixture", ALL_PASS[3]], exit_code=1),
    "p2p_missing": _log(ALL_PASS[:3], exit_code=0),
    "p2p_skipped": _log([*ALL_PASS[:3], "SKIPPED tests/test_y.py::test_other"]),
    "f2p_skipped": _log(["SKIPPED tests/test_x.py::test_fix", *ALL_PASS[1:]]),
    "xfail": _log(["XFAIL tests/test_x.py::test_fix", *ALL_PASS[1:]]),
    "apply_failed": ">>>>> Patch Apply Failed:\nerror: patch failed: a.py:3\n",
    "timeout": _log(ALL_PASS) + ">>>>> Tests Timed Out\n",
    "no_markers": "\n".join(ALL_PASS) + "\n",
    "spoofed_pass_nonzero_exit": _log(ALL_PASS, exit_code=2),
    "empty_run": _log([], exit_code=5),
    "skip_summary_line": _log([*ALL_PASS, "SKIPPED [1] tests/test_x.py:10: no reason"]),
}


def _row(f2p, p2p, iid="local__x-1"):
    return {"instance_id": iid, "repo": "local/x", "version": "0.1", "image": "img", "log_parser": "parse_log_pytest",
            "eval_type": "pass_and_fail", "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "eval_script": "#!/bin/bash\n"
            "echo '>>>>> Start Test Output'\npytest -rA\necho '>>>>> End Test Output'\n"}


def _swebench_report(row, log_text, tmp_path, patch="diff"):
    path = tmp_path / "test_output.txt"
    path.write_text(log_text)
    pred = {"instance_id": row["instance_id"], "model_name_or_path": "m", "model_patch": patch}
    return grading.get_eval_report(make_test_spec(row), pred, str(path), include_tests_status=True)[row["instance_id"]]


def _assert_same(ours, theirs):
    assert ours["resolved"] == theirs["resolved"]
    assert ours["patch_successfully_applied"] == theirs["patch_successfully_applied"]
    if theirs["patch_successfully_applied"]:
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            assert ours["tests_status"][key] == theirs["tests_status"][key]


@pytest.mark.parametrize("case", sorted(CASES))
def test_canned_logs_match_swebench(case, tmp_path):
    row = _row(F2P, P2P)
    theirs = _swebench_report(row, CASES[case], tmp_path)
    ours = grade_log(row["instance_id"], CASES[case], F2P, P2P).as_swebench()[row["instance_id"]]
    _assert_same(ours, theirs)


def test_canned_cases_cover_both_verdicts(tmp_path):
    verdicts = {case: grade_log("i", log, F2P, P2P).resolved for case, log in CASES.items()}
    assert verdicts["resolved"] and verdicts["xfail"] and verdicts["p2p_skipped"]
    assert not any(verdicts[c] for c in ("partial", "unresolved", "p2p_broken", "f2p_skipped", "apply_failed",
                                          "timeout", "spoofed_pass_nonzero_exit", "no_markers"))


@pytest.mark.parametrize("status", ["PASSED", "FAILED"])
def test_truncated_parametrized_ids_match_swebench(status, tmp_path):
    f2p = ["tests/test_x.py::test_fix", "tests/test_x.py::test_grammar[log(photon"]
    log_text = _log([ALL_PASS[0], f"{status} tests/test_x.py::test_grammar[log(photon-1]", *ALL_PASS[2:]],
                    exit_code=0 if status == "PASSED" else 1)
    row = _row(f2p, P2P)
    ours = grade_log(row["instance_id"], log_text, f2p, P2P)
    assert ours.resolved == (status == "PASSED")
    _assert_same(ours.as_swebench()[row["instance_id"]], _swebench_report(row, log_text, tmp_path))


def test_parser_matches_swebench_parser():
    from swebench.harness.log_parsers import PARSER_REGISTRY

    spec = make_test_spec(_row(F2P, P2P))
    for log_text in CASES.values():
        assert parse_pytest_log(log_text) == PARSER_REGISTRY["parse_log_pytest"](log_text, spec)


def test_real_local_logs_match_swebench(local_tasks, tmp_path):
    """Logs produced by actually running a local task (gold and empty patch) grade the same in both."""
    task = next(t for t in local_tasks if t.instance_id == "local__scheduler-1")
    backend = LocalBackend()
    backend.start(task)
    try:
        results = [backend.evaluate(task.patch), backend.evaluate("")]
    finally:
        backend.close()
    assert [r.resolved for r in results] == [True, False]
    for result in results:
        theirs = _swebench_report(task.to_row(), result.log, tmp_path)
        _assert_same(result.as_swebench()[task.instance_id], theirs)
