"""Review 3 of the SWE env: one test per finding.

1. every pytest configuration name, symlinks and pytest settings hidden from a regex (TOML escapes) are refused;
2. the editor numbers only what it shows, refuses huge files and caps its observations like bash;
3. the Docker backend reads command output through a bounded capture and passes its memory/process limits;
5. a file whose name git quotes (space, non-ASCII) no longer hides the real fix; refused chunks are reported;
6. grading loads installed pytest plugins (as swebench does); a patch may not add package metadata to be loaded;
7. a fix next to bytes that are not UTF-8 is graded with its exact bytes;
S. marker lines printed twice (e.g. a fake exit code) make the log untrusted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.tools import ToolError
from trace_envs.swe import patches
from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.docker_backend import DockerBackend
from trace_envs.swe.editor import Editor
from trace_envs.swe.env import SWEBenchEnv
from trace_envs.swe.grading import END_TEST_OUTPUT, START_TEST_OUTPUT, status_map_from_log
from trace_envs.swe.host_git import GIT_IDENTITY
from trace_envs.swe.patches import files_in_patch, filter_patch
from trace_envs.swe.sandbox import SandboxLimits
from trace_envs.swe.task import SWETask

INVENTORY = "local__inventory-1"
CHEAT_PLUGIN = ("cat > inventory/_cheat.py <<'X'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n"
                "def pytest_runtest_makereport(item, call):\n    out = yield\n    rep = out.get_result()\n"
                "    rep.outcome = 'passed'; rep.longrepr = None\nX\n")
SOURCE_EDIT = ("diff --git a/pkg/core.py b/pkg/core.py\nindex 1111111..2222222 100644\n--- a/pkg/core.py\n"
               "+++ b/pkg/core.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 1\n+y = 2\n")


def _new_file(path: str, text: str, mode: str = "100644") -> str:
    body = "".join(f"+{line}\n" for line in text.splitlines())
    return (f"diff --git a/{path} b/{path}\nnew file mode {mode}\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{len(text.splitlines())} @@\n{body}")


def _sh(cwd: Path, cmd: str) -> str:
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(cmd, shell=True, cwd=cwd, env=env, check=True, capture_output=True).stdout.decode(
        "utf-8", "surrogateescape")


def _episode(command: str, dataset: str = "local", options: dict | None = None):
    """Run one bash command in a fresh episode, submit, return ``(reward, info)``."""
    env = SWEBenchEnv(dataset=dataset, backend="local")
    env.reset(seed=0, options=options if options is not None else {"instance_id": INVENTORY})
    try:
        env.step(format_tool_call("bash", {"command": command}))
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated
        return reward, info
    finally:
        env.close()


def _task_file(tmp_path: Path, files: dict[str, bytes], test_patch: str, f2p: list[str], patch: str = "") -> str:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name, data in files.items():
        (repo / name).write_bytes(data)
    row = {"instance_id": "r3-1", "repo": "x/r3", "base_commit": "", "problem_statement": "f must return 2",
           "patch": patch, "test_patch": test_patch, "FAIL_TO_PASS": f2p, "PASS_TO_PASS": [],
           "repo_path": str(repo)}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return str(path)


TEST_F = ("diff --git a/tests/test_mod.py b/tests/test_mod.py\nnew file mode 100644\n--- /dev/null\n"
          "+++ b/tests/test_mod.py\n@@ -0,0 +1,3 @@\n+from mod import f\n+def test_f():\n+    assert f() == 2\n")


# -- 1. pytest configuration -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [".pytest.ini", "pytest.toml", ".pytest.toml", "pkg/.pytest.ini",
                                  "x.egg-info/entry_points.txt", "X.Dist-Info/METADATA", "entry_points.txt",
                                  "src/a.egg-link"])
def test_every_pytest_config_name_and_package_metadata_is_refused(path):
    patch = SOURCE_EDIT + _new_file(path, "[pytest]\naddopts = -p x\n")
    assert filter_patch(patch) == SOURCE_EDIT
    screened = patches.screen_patch(patch)
    assert screened.patch == SOURCE_EDIT and len(screened.dropped) == 1 and path in screened.dropped[0]


def test_symlinks_are_refused_whatever_their_name():
    link = _new_file("setup.cfg", "cfg.txt", mode="120000")
    other = _new_file("docs/link", "../README", mode="120000")
    changed = ("diff --git a/lnk b/lnk\nindex 1111111..2222222 120000\n--- a/lnk\n+++ b/lnk\n@@ -1 +1 @@\n-a\n"
               "\\ No newline at end of file\n+b\n\\ No newline at end of file\n")
    for chunk in (link, other, changed):
        assert filter_patch(SOURCE_EDIT + chunk) == SOURCE_EDIT
        screened = patches.screen_patch(SOURCE_EDIT + chunk)
        assert screened.patch == SOURCE_EDIT and "symlink" in screened.dropped[0]


PYPROJECT = b'[build-system]\nrequires = ["setuptools"]\n\n[project]\nname = "x"\nversion = "1"\n'


def _pyproject_edit(added: str) -> str:
    lines = added.splitlines()
    return ("diff --git a/pyproject.toml b/pyproject.toml\nindex 1..2 100644\n--- a/pyproject.toml\n"
            f"+++ b/pyproject.toml\n@@ -5,2 +5,{2 + len(lines)} @@\n name = \"x\"\n version = \"1\"\n"
            + "".join(f"+{line}\n" for line in lines))


def test_pyproject_pytest_settings_are_read_with_tomllib_not_a_regex():
    base = {"pyproject.toml": PYPROJECT}.get
    escaped = _pyproject_edit('[tool]\npytest.ini_options."addopt\\u0073" = "-p cheat"')
    assert filter_patch(escaped, base) == ""
    dotted = _pyproject_edit('[tool."pyt\\u0065st"]\nx = 1')
    assert filter_patch(dotted, base) == ""
    plain = _pyproject_edit('description = "fixed"')
    assert filter_patch(plain, base) == plain
    assert filter_patch(plain) == ""  # base content unknown: an existing pyproject.toml cannot be checked


def test_setup_cfg_change_that_grows_the_pytest_section_is_refused():
    base = {"setup.cfg": b"[tool:pytest]\naddopts = -q\n[metadata]\nname = x\n"}.get
    unheader = ("diff --git a/setup.cfg b/setup.cfg\nindex 1..2 100644\n--- a/setup.cfg\n+++ b/setup.cfg\n"
                "@@ -2,3 +2,2 @@\n addopts = -q\n-[metadata]\n name = x\n")
    assert filter_patch(unheader, base) == "" and patches.screen_patch(unheader, base).dropped
    hidden = ("diff --git a/setup.cfg b/setup.cfg\nindex 1..2 100644\n--- a/setup.cfg\n+++ b/setup.cfg\n"
              "@@ -4 +4,2 @@\n name = x\n+version = 2\x0c[tool:pytest]\n")
    assert filter_patch(hidden, base) == "" and filter_patch(hidden) == ""
    plain = ("diff --git a/setup.cfg b/setup.cfg\nindex 1..2 100644\n--- a/setup.cfg\n+++ b/setup.cfg\n"
             "@@ -4 +4,2 @@\n name = x\n+version = 2\n")
    assert filter_patch(plain, base) == plain


@pytest.mark.parametrize("cheat", [
    "printf '[tool:pytest]\\naddopts = -p inventory._cheat\\n' > cfg.txt; rm -f setup.cfg; ln -s cfg.txt setup.cfg",
    "printf '[tool]\\npytest.ini_options.\"addopt\\\\u0073\" = \"-p inventory._cheat\"\\n' > pyproject.toml",
    "printf '[pytest]\\naddopts = [\"-p\", \"inventory._cheat\"]\\n' > pytest.toml",
    # autoloading is on at grading: a distribution's entry point in the checkout (on sys.path) would load the plugin
    "mkdir -p cheat.egg-info && printf '[pytest11]\\ncheat = inventory._cheat\\n' > cheat.egg-info/entry_points.txt"
    " && printf 'Metadata-Version: 2.1\\nName: cheat\\nVersion: 1\\n' > cheat.egg-info/PKG-INFO",
])
def test_a_wrong_patch_that_reconfigures_pytest_is_not_resolved(local_tasks, cheat):
    reward, info = _episode(cheat + "\n" + CHEAT_PLUGIN)
    assert reward == 0.0 and not info["resolved"]
    assert info["eval"]["dropped_chunks"], info["eval"]


# -- 2. the editor -------------------------------------------------------------------------------------------------
@pytest.fixture()
def editor(local_tasks):
    backend = LocalBackend()
    backend.start(next(t for t in local_tasks if t.instance_id == INVENTORY))
    yield Editor(backend)
    backend.close()


def test_editor_observations_are_capped_like_bash(editor):
    root, cap = editor.backend._ws().root, editor.backend.limits.max_output_chars
    (root / "many.py").write_text("".join(f"x = {i}\n" for i in range(100_000)))  # < MAX_EDIT_BYTES
    view = editor("view", "many.py")
    assert len(view) <= cap and view.endswith("<response clipped; use view_range to see the rest>")
    assert editor("view", "many.py", view_range=[99_999, 100_000]).splitlines()[1:] == [" 99999\tx = 99998",
                                                                                        "100000\tx = 99999"]
    with pytest.raises(ToolError) as err:
        editor("str_replace", "many.py", old_str="x = ", new_str="y = ")
    assert len(str(err.value)) < 500 and "99980 more" in str(err.value)


def test_editor_refuses_files_over_the_size_limit(editor):
    root = editor.backend._ws().root
    (root / "nl.txt").write_bytes(b"\n" * 3_000_000)
    for args in ({"command": "view"}, {"command": "str_replace", "old_str": "\n\n", "new_str": ""},
                 {"command": "insert", "insert_line": 0, "new_str": "x"}):
        with pytest.raises(ToolError, match="use bash|with bash"):
            editor(path="nl.txt", **args)
    assert (root / "nl.txt").stat().st_size == 3_000_000


# -- 3. the Docker backend -----------------------------------------------------------------------------------------
def test_docker_run_gets_the_memory_and_process_limits(fake_docker_cli):
    backend = DockerBackend(SandboxLimits(memory_mb=300, max_processes=40))
    backend.start(SWETask("x__y-1", "x/y", "abc", "p", image="img"))
    backend.container = None  # nothing to `docker rm`
    argv = (fake_docker_cli / "run_argv").read_text().split("\n")
    assert argv[argv.index("--memory") + 1] == "300m" and argv[argv.index("--pids-limit") + 1] == "40"
    info = backend.sandbox_info()
    assert "300 MB" in info["memory_limit"] and "40" in info["process_limit"]


def test_docker_output_is_read_through_a_bounded_capture(fake_docker_cli):
    # in a child process, so that its peak of Python allocations says what one flooding command cost the host
    code = textwrap.dedent("""
        import tracemalloc
        from trace_envs.swe.docker_backend import DockerBackend
        b = DockerBackend(); b.container = "fake"
        tracemalloc.start()
        res = b.run("head -c 50000000 /dev/zero | tr '\\\\0' x")
        print(len(res.output), tracemalloc.get_traced_memory()[1] // 2**20)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    chars, peak_mb = map(int, out.stdout.split())
    assert chars < 11_000 and peak_mb < 10, out.stdout


def test_docker_command_killed_early_is_not_reported_as_timed_out(fake_docker_cli):
    backend = DockerBackend()
    backend.container = "fake"
    # `docker exec` exits 137 for a command the kernel killed (e.g. out of memory) long before the deadline
    res = backend.run("echo before; exit 137")
    assert res.returncode == 137 and not res.timed_out and "before" in res.output


# -- 5. quoted paths -----------------------------------------------------------------------------------------------
def test_files_git_quotes_keep_their_own_chunks(tmp_path):
    _sh(tmp_path, "git init -q && printf 'x = 1\\n' > a.py && git add -A && git commit -qm base")
    (tmp_path / "a.py").write_text("x = 2\n")
    (tmp_path / "z notes.txt").write_text("hi\n")
    (tmp_path / "résumé.txt").write_text("hi\n")
    (tmp_path / 'q"uote\tx.txt').write_text("hi\n")
    patch = _sh(tmp_path, "git add -A && git -c core.quotePath=true diff --cached --src-prefix=a/ --dst-prefix=b/ "
                          "HEAD")
    assert '"b/r\\303\\251sum\\303\\251.txt"' in patch
    assert filter_patch(patch) == patch and patches.screen_patch(patch).dropped == []
    assert files_in_patch(patch) == ["a.py", 'q"uote\tx.txt', "résumé.txt", "z notes.txt"]
    protected = _sh(tmp_path, "mkdir -p 'my tests' && echo x > 'my tests/conftest.py' && git add -A && "
                              "git diff --cached --src-prefix=a/ --dst-prefix=b/ HEAD")
    assert "my tests/conftest.py" not in filter_patch(protected) and "a/a.py" in filter_patch(protected)


def test_a_right_fix_beside_a_file_with_a_space_is_resolved(local_tasks):
    task = next(t for t in local_tasks if t.instance_id == INVENTORY)
    reward, info = _episode(f"git apply - <<'EOF'\n{task.patch}EOF\necho hi > 'inventory/z notes.txt'\n"
                            "echo hi > inventory/résumé.txt")
    assert reward == 1.0 and info["eval"]["dropped_chunks"] == []


# -- 6. plugin autoloading -----------------------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("pytest_timeout") is None, reason="needs pytest-timeout installed")
def test_a_repo_config_that_needs_an_installed_plugin_grades_the_gold_patch(tmp_path):
    gold = ("diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n"
            "+    return 2\n")
    dataset = _task_file(tmp_path, {"mod.py": b"def f():\n    return 1\n",
                                    "setup.cfg": b"[tool:pytest]\naddopts = --timeout=60\n"},
                         TEST_F, ["tests/test_mod.py::test_f"], gold)
    reward, info = _episode(f"git apply - <<'EOF'\n{gold}EOF", dataset, options={})
    assert reward == 1.0, info["eval"]


# -- 7. bytes that are not UTF-8 -----------------------------------------------------------------------------------
def test_a_fix_next_to_latin1_bytes_is_graded_with_its_exact_bytes(tmp_path):
    dataset = _task_file(tmp_path, {"mod.py": b"# -*- coding: latin-1 -*-\ndef f():\n    return 1  # caf\xe9\n"},
                         TEST_F, ["tests/test_mod.py::test_f"])
    reward, info = _episode("sed -i 's/return 1/return 2/' mod.py", dataset, options={})
    assert reward == 1.0 and info["eval"]["patch_applied"]
    json.dumps(info["patch"], ensure_ascii=False).encode("utf-8")  # the shown copy is plain text
    assert "caf\ufffd" in info["patch"]


# -- S. repeated markers -------------------------------------------------------------------------------------------
def test_a_fake_exit_code_printed_before_the_real_one_makes_the_log_untrusted():
    summary = "PASSED tests/test_a.py::test_a\n"
    fake = f"{START_TEST_OUTPUT}\n{summary}>>>>> Test Exit Code: 0\n{END_TEST_OUTPUT}\n>>>>> Test Exit Code: 137\n"
    assert status_map_from_log(fake) == ({}, False)
    early_end = f"{START_TEST_OUTPUT}\n{END_TEST_OUTPUT}\n{summary}{END_TEST_OUTPUT}\n>>>>> Test Exit Code: 0\n"
    assert status_map_from_log(early_end) == ({}, False)
    traced = (f"+ echo '{START_TEST_OUTPUT}'\n{START_TEST_OUTPUT}\n{summary}+ echo '{END_TEST_OUTPUT}'\n"
              f"{END_TEST_OUTPUT}\n+ echo '>>>>> Test Exit Code: 0'\n>>>>> Test Exit Code: 0\n")
    assert status_map_from_log(traced) == ({"tests/test_a.py::test_a": "PASSED"}, True)
