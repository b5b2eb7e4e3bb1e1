"""What an agent's submission may not carry into grading: test files, test-runner configuration, git's own files,
paths outside the repository, and sections the diff did not attribute to a file (a workspace's ``.git/config`` can
make ``git diff`` print anything); a test reported both failed and passed counts as failed."""

from __future__ import annotations

import pytest

from trace_envs.core.parsing import format_tool_call
from trace_envs.swe.env import SWEBenchEnv
from trace_envs.swe.grading import END_TEST_OUTPUT, START_TEST_OUTPUT, status_map_from_log
from trace_envs.swe.patches import chunk_paths, eval_script, filter_patch


def _new_file(path: str, text: str = "x = 1\n") -> str:
    body = "".join(f"+{line}\n" for line in text.splitlines())
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{len(text.splitlines())} @@\n{body}")


SOURCE_EDIT = ("diff --git a/pkg/core.py b/pkg/core.py\nindex 1111111..2222222 100644\n--- a/pkg/core.py\n"
               "+++ b/pkg/core.py\n@@ -1,3 +1,3 @@\n x = 1\n--- a comment that starts with two dashes\n"
               "+y = 2\n z = 3\n")


@pytest.mark.parametrize("path", ["pytest.ini", "tox.ini", "sub/sitecustomize.py", "usercustomize.py",
                                  "evil.pth", ".git/hooks/post-checkout", "conftest.py", "tests/test_x.py"])
def test_chunks_touching_protected_paths_are_dropped(path):
    assert filter_patch(SOURCE_EDIT + _new_file(path)) == SOURCE_EDIT


def test_a_second_files_section_glued_onto_a_chunk_drops_the_chunk():
    glued = _new_file("NOTES.txt", "notes\n") + "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import pytest\n"
    assert chunk_paths(glued) is None
    assert filter_patch(SOURCE_EDIT + glued) == SOURCE_EDIT
    assert chunk_paths(SOURCE_EDIT) == {"pkg/core.py"}  # a removed "-- ..." line is hunk content, not a file line


def test_pytest_settings_in_setup_cfg_or_pyproject_are_dropped_other_edits_kept():
    pytest_cfg = ("diff --git a/setup.cfg b/setup.cfg\nindex 1..2 100644\n--- a/setup.cfg\n+++ b/setup.cfg\n"
                  "@@ -1,1 +1,3 @@\n [metadata]\n+[tool:pytest]\n+addopts = -p pkg._cheat\n")
    plain_cfg = ("diff --git a/setup.cfg b/setup.cfg\nindex 1..2 100644\n--- a/setup.cfg\n+++ b/setup.cfg\n"
                 "@@ -1,1 +1,2 @@\n [metadata]\n+version = 2\n")
    assert filter_patch(pytest_cfg) == "" and filter_patch(plain_cfg) == plain_cfg
    toml = _new_file("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-p x'\n")
    assert filter_patch(toml) == ""


def test_a_binary_chunk_is_kept_and_nothing_may_follow_its_data():
    binary = ("diff --git a/img.png b/img.png\nnew file mode 100644\nindex 0000000..3333333\nGIT binary patch\n"
              "literal 3\nKcmZ>Y%L4!b0RRC2\n\nliteral 0\nHcmV?d00001\n\n")
    assert filter_patch(binary) == binary
    assert filter_patch(binary + "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+x\n") == ""


def test_the_eval_script_resets_tests_with_hooks_off():
    test_patch = _new_file("tests/test_x.py", "def test_x():\n    assert True\n")
    script = eval_script("abc123", test_patch)
    assert "git -c core.hooksPath=/dev/null checkout abc123 -- tests/test_x.py" in script


def test_a_test_reported_failed_and_then_passed_counts_as_failed():
    log = (f"{START_TEST_OUTPUT}\nFAILED tests/test_b.py::test_t - assert 1 == 2\nPASSED tests/test_a.py::test_ok\n"
           f"PASSED tests/test_b.py::test_t\n{END_TEST_OUTPUT}\n>>>>> Test Exit Code: 0\n")
    status, found = status_map_from_log(log)
    assert found and status == {"tests/test_b.py::test_t": "FAILED", "tests/test_a.py::test_ok": "PASSED"}


def _bash(env, command):
    obs, *_ = env.step(format_tool_call("bash", {"command": command}))
    return obs[0]["content"]


@pytest.mark.parametrize("cheat", [
    # a root pytest.ini that loads a plugin from the source tree turning every failure into a pass
    "printf '[pytest]\\naddopts = -p inventory._cheat\\n' > pytest.ini",
    # the same plugin from setup.cfg
    "printf '[tool:pytest]\\naddopts = -p inventory._cheat\\n' >> setup.cfg",
])
def test_a_submission_that_reconfigures_pytest_is_not_resolved(local_tasks, cheat):
    env = SWEBenchEnv(dataset="local", backend="local")
    env.reset(seed=0, options={"instance_id": "local__inventory-1"})
    try:
        _bash(env, cheat + "\ncat > inventory/_cheat.py <<'X'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n"
                   "def pytest_runtest_makereport(item, call):\n    out = yield\n    rep = out.get_result()\n"
                   "    rep.outcome = 'passed'; rep.longrepr = None\nX\n")
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated and reward == 0.0 and not info.get("resolved")
    finally:
        env.close()
