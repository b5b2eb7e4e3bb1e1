"""The local sandbox keeps the agent away from the answer and the host (issue #24): one test per escape probe.

Probes that need a confinement this machine lacks are skipped with the reason; the fallback paths
(process scan, watchdog, loud reporting) are exercised by simulating a machine without namespaces.
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import sys
from pathlib import Path

import pytest

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.tools import ToolError
from trace_envs.swe import confinement as conf
from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.editor import Editor
from trace_envs.swe.env import SWEBenchEnv
from trace_envs.swe.local_tasks import build_task_repo
from trace_envs.swe.sandbox import SandboxLimits

AVAIL = conf.available()
needs_jail = pytest.mark.skipif(not AVAIL.mount_namespace, reason=f"no mount namespace here: {AVAIL.errors}")
needs_netns = pytest.mark.skipif(not AVAIL.network_namespace, reason=f"no network namespace here: {AVAIL.errors}")
TEXTKIT = "local__textkit-1"
PRUNE = " -o ".join(f"-path {shlex.quote(p)}" for p in sorted({"/usr", "/proc", sys.prefix, sys.base_prefix}))


def bash(env, command: str) -> str:
    obs, *_ = env.step(format_tool_call("bash", {"command": command}))
    return obs[0]["content"]


def output_of(tool_text: str) -> str:
    return tool_text.split("<output>\n", 1)[1].rsplit("</output>", 1)[0]


def find_cmd(*names: str) -> str:
    """``find /`` for ``names``, skipping the read-only system and interpreter trees (large, not task data)."""
    pattern = " -o ".join(f"-name {shlex.quote(n)}" for n in names)
    return f"find / \\( {PRUNE} \\) -prune -o \\( {pattern} \\) -print 2>/dev/null; echo END"


def procs_with(arg: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if arg.encode() in fh.read().split(b"\0") and conf._alive(int(name)):
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return found


@pytest.fixture()
def no_namespaces(monkeypatch):
    """A machine where no namespace can be made (CI containers, locked-down hosts)."""
    unavailable = conf.Availability(errors={f: "simulated: unshare not permitted" for f in conf.FEATURES})
    monkeypatch.setattr(conf, "available", lambda: unavailable)
    monkeypatch.setattr(conf, "_warned", set())
    return unavailable


@pytest.fixture()
def own_task_repo(tmp_path):
    return build_task_repo(tmp_path / "tasks")


# -- 1. grading material ---------------------------------------------------------------------------
def test_local_dataset_grading_material_exists_only_in_memory():
    env = SWEBenchEnv(dataset="local", backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TEXTKIT})
        scratch = env._scratch
        on_disk = [p for p in scratch.rglob("*") if p.name in ("gold.patch", "test.patch", "test_truncate.py")]
        assert on_disk == []
        out = bash(env, f"ls {scratch}/local_tasks/tasks/{TEXTKIT}/gold.patch; cat /tmp/trace-swe-tasks-*/local_tasks/"
                        f"tasks/{TEXTKIT}/gold.patch")
        assert "No such file" in out and "diff --git" not in out
        assert env.episode.task.patch.startswith("diff --git")  # the grader still has it
    finally:
        env.close()


@needs_jail
def test_agent_cannot_find_read_or_apply_the_gold_patch(task_repo):
    env = SWEBenchEnv(dataset=str(task_repo), backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TEXTKIT})
        old_paths = [task_repo / "tasks" / TEXTKIT / f for f in ("gold.patch", "test.patch", "eval.sh")]
        assert all(p.is_file() for p in old_paths)  # the files exist on the host ...
        out = bash(env, find_cmd("gold.patch", "test.patch", "test_truncate.py"))
        assert output_of(out).strip() == "END"  # ... but nowhere in the agent's view
        out = bash(env, " ; ".join(f"cat {p}" for p in old_paths))
        assert out.count("No such file or directory") == 3 and "diff --git" not in out
        out = bash(env, f"git apply {old_paths[0]} && echo APPLIED")
        assert "APPLIED" not in out
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated and reward == 0.0 and info["patch"] == ""
    finally:
        env.close()


# -- 2. confinement of bash ------------------------------------------------------------------------
@needs_jail
def test_bash_cannot_write_outside_the_workspace(local_tasks, tmp_path):
    task = next(t for t in local_tasks if t.instance_id == TEXTKIT)
    source = task.repo_path / "textkit" / "shorten.py"
    before = source.read_text()
    backend = LocalBackend()
    backend.start(task)
    try:
        targets = [tmp_path / "escape.txt", Path("/usr/local/escape.txt"), Path("/etc/escape.txt"),
                   Path("/escape.txt"), source]
        res = backend.run(" ; ".join(f"echo pwned >> {shlex.quote(str(t))}" for t in targets) + "; echo ok > a.txt")
        assert res.output.count("Read-only file system") + res.output.count("No such file") == len(targets)
        assert backend.read_file("a.txt") == "ok\n"  # the workspace itself is writable
        res = backend.run("mount -o remount,rw /usr; unshare -Urm true; touch /usr/escape2 && echo WROTE")
        assert "WROTE" not in res.output
    finally:
        backend.close()
    assert not any(t.exists() for t in targets[:-1]) and not Path("/usr/escape2").exists()
    assert source.read_text() == before


@needs_jail
def test_extra_ro_paths_are_visible_read_only(local_tasks, tmp_path):
    (tmp_path / "tool.txt").write_text("tool\n")
    backend = LocalBackend(SandboxLimits(ro_paths=(str(tmp_path), str(tmp_path / "missing"))))
    backend.start(local_tasks[0])
    try:
        res = backend.run(f"cat {tmp_path}/tool.txt; echo x > {tmp_path}/new.txt")
    finally:
        backend.close()
    assert res.output.startswith("tool\n") and "Read-only file system" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tool.txt"]


def test_editor_refuses_paths_resolving_outside_the_repo(local_tasks, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("host secret\n")
    backend = LocalBackend()
    backend.start(next(t for t in local_tasks if t.instance_id == TEXTKIT))
    editor = Editor(backend)
    try:
        res = backend.run(f"ln -s / rootlink && ln -s {outside} secret && ln -s .. up && mkdir d && "
                          f"ln -s {tmp_path} d/out && echo linked")
        assert "linked" in res.output
        attempts = [("view", "secret", {}), ("view", f"rootlink{outside}", {}), ("view", "up", {}),
                    ("create", "d/out/new.txt", {"file_text": "x"}),
                    ("create", "rootlink/tmp/new.txt", {"file_text": "x"}),
                    ("str_replace", "secret", {"old_str": "host", "new_str": "agent"}),
                    ("insert", "d/out/secret.txt", {"insert_line": 0, "new_str": "x"})]
        for command, path, kwargs in attempts:
            with pytest.raises(ToolError, match="resolves outside the repository"):
                editor(command, path, **kwargs)
        backend.run("mkfifo pipe")
        with pytest.raises(ToolError, match="not a regular file"):  # opening it would block the host
            editor("view", "pipe")
        assert "textkit" in editor("view", ".")  # ordinary paths still work
    finally:
        backend.close()
    assert outside.read_text() == "host secret\n" and sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt"]


@needs_jail
@needs_netns
def test_host_unix_sockets_cannot_be_reached(local_tasks, tmp_path):
    path_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path_sock.bind(str(tmp_path / "host.sock"))
    path_sock.listen(1)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"trace-test-{os.getpid()}"
    abstract.bind("\0" + name)
    abstract.listen(1)
    probe = ("import socket\n"
             "for addr in ({path!r}, '\\0' + {name!r}):\n"
             "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
             "    try:\n        s.connect(addr); print('CONNECTED', repr(addr))\n"
             "    except OSError as e:\n        print('refused', type(e).__name__)\n")
    backend = LocalBackend()
    backend.start(local_tasks[0])
    try:
        res = backend.run(f"python -c {shlex.quote(probe.format(path=str(tmp_path / 'host.sock'), name=name))}")
    finally:
        backend.close()
        path_sock.close()
        abstract.close()
    assert "CONNECTED" not in res.output and res.output.count("refused") == 2, res.output


@pytest.mark.parametrize("mode", ["confined", "no_namespaces"])
def test_background_processes_die_with_the_step_and_close(mode, task_repo, request):
    if mode == "no_namespaces":
        request.getfixturevalue("no_namespaces")
    marks = ["31411", "31412", "31413"]
    env = SWEBenchEnv(dataset=str(task_repo), backend="local")
    try:
        env.reset(seed=0, options={"task_index": 0})
        out = bash(env, f"setsid sleep {marks[0]} > /dev/null 2>&1 & disown; nohup sleep {marks[1]} > /dev/null 2>&1 &"
                        f" (setsid sh -c 'sleep {marks[2]}' > /dev/null 2>&1 &); sleep 0.2; echo started")
        assert "started" in out
        assert [procs_with(m) for m in marks] == [[], [], []]
        bash(env, f"setsid sleep {marks[0]} > /dev/null 2>&1 & disown")
        env.close()
        assert procs_with(marks[0]) == []
    finally:
        env.close()
        for m in marks:
            for pid in procs_with(m):
                os.kill(pid, 9)


@pytest.mark.parametrize("mode", ["confined", "no_namespaces"])
def test_total_memory_limit_stops_processes_that_fit_one_by_one(mode, local_tasks, request):
    if mode == "no_namespaces":
        request.getfixturevalue("no_namespaces")
    hog = "python -c \"import sys, time; b = b'x' * (200 << 20); time.sleep(2); print('done', sys.argv[1])\""
    backend = LocalBackend(SandboxLimits(timeout_s=20, memory_mb=400))
    backend.start(local_tasks[0])
    try:
        alone = backend.run(hog.replace("time.sleep(2)", "time.sleep(0.1)") + " 0")
        three = backend.run(" ".join(f"{hog} {i} &" for i in range(3)) + " wait")
    finally:
        backend.close()
    assert alone.returncode == 0 and "done 0" in alone.output  # one 200 MB process is fine ...
    assert three.killed == "memory" and three.output.count("done") < 3, three.output  # ... three at once are not
    assert "killed: memory" in three.output


def test_process_count_limit(local_tasks):
    backend = LocalBackend(SandboxLimits(timeout_s=20, max_processes=20))
    backend.start(local_tasks[0])
    try:
        res = backend.run("for i in $(seq 60); do sleep 5 & done; wait; echo finished")
    finally:
        backend.close()
    assert res.killed == "processes" and "finished" not in res.output


def test_reset_info_reports_the_confinement():
    env = SWEBenchEnv(dataset="local", backend="local")
    try:
        _, info = env.reset(seed=0, options={"instance_id": TEXTKIT})
    finally:
        env.close()
    report = info["sandbox"]
    for key in ("user_namespace", "mount_namespace", "pid_namespace", "network_namespace", "capabilities_dropped"):
        assert report[key] == getattr(AVAIL, "caps_dropped" if key == "capabilities_dropped" else key)
    assert report["process_cleanup"] == ("pid_namespace" if AVAIL.pid_namespace else "process_scan")
    assert "watchdog" in report["memory_limit"] and "RLIMIT_AS" in report["memory_limit"]
    missing = {f for f in conf.FEATURES if not getattr(AVAIL, f)}
    assert missing - {"proc"} <= set(report["unavailable"]) <= missing


def test_missing_confinements_are_reported_loudly(no_namespaces, caplog):
    env = SWEBenchEnv(dataset="local", backend="local")
    try:
        with caplog.at_level(logging.WARNING, logger="trace_envs.swe.confinement"):
            _, info = env.reset(seed=0, options={"instance_id": TEXTKIT})
        out = bash(env, "echo still-works")
    finally:
        env.close()
    report = info["sandbox"]
    assert not report["mount_namespace"] and not report["pid_namespace"] and not report["network_namespace"]
    assert report["network"] == "host (isolation unavailable)" and report["process_cleanup"] == "process_scan"
    assert {"user_namespace", "mount_namespace", "pid_namespace", "network_namespace",
            "caps_dropped"} <= set(report["unavailable"])
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for feature in report["unavailable"]:
        assert f"{feature} is unavailable" in warned
    assert "network_namespace is unavailable (simulated" in warned
    assert "still-works" in out


def test_network_allowed_by_config_is_reported_not_warned(caplog, monkeypatch):
    monkeypatch.setattr(conf, "_warned", set())
    env = SWEBenchEnv(dataset="local", backend="local", network=True)
    try:
        with caplog.at_level(logging.WARNING, logger="trace_envs.swe.confinement"):
            _, info = env.reset(seed=0, options={"instance_id": TEXTKIT})
    finally:
        env.close()
    assert info["sandbox"]["network"] == "host (allowed by config)" and not info["sandbox"]["network_namespace"]
    assert "network_namespace" not in info["sandbox"]["unavailable"]
    assert "network_namespace" not in caplog.text


@needs_jail
def test_git_config_hooks_never_run_on_the_host(local_tasks, tmp_path):
    marker = tmp_path / "fsmonitor-ran"
    backend = LocalBackend()
    backend.start(local_tasks[0])
    try:
        backend.run(f"git config core.fsmonitor 'touch {marker}; false' && echo x >> README.txt")
        diff = backend.diff()
    finally:
        backend.close()
    assert "README.txt" in diff and not marker.exists()


# -- 3. each episode on its own copy ---------------------------------------------------------------
def test_editing_the_task_source_neither_breaks_submit_nor_later_resets(own_task_repo):
    source = own_task_repo / "tasks" / TEXTKIT / "repo" / "textkit" / "shorten.py"
    pristine = source.read_text()
    env = SWEBenchEnv(dataset=str(own_task_repo), backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TEXTKIT})
        bash(env, f"echo '# agent was here' >> {source}")  # contained by the jail where there is one ...
        with source.open("a") as fh:  # ... and an unconfined agent (or anyone) may still edit it
            fh.write("# edited\n")
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert terminated and reward == 0.0 and info["eval"]["resolution"] == "RESOLVED_NO"
        for _ in range(2):
            env.reset(seed=0, options={"instance_id": TEXTKIT})
            assert env.episode.backend.read_file("textkit/shorten.py") == pristine
            assert output_of(bash(env, "git status --porcelain")) == ""
    finally:
        env.close()
