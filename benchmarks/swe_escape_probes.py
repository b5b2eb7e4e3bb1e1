"""Escape probes against the SWE env's local backend: can the agent reach the answer or the host?

Usage: python benchmarks/swe_escape_probes.py [--skip-memory] [--simulate-no-namespaces]
Each probe is what an agent could do from its tools (bash, str_replace_editor, submit); the table
says whether it was tried, whether it was contained and how (or what got through). The probes only
touch temporary paths this script creates (plus ``/usr/local`` and ``/etc`` write attempts, removed
again if they succeed). ``--skip-memory`` leaves out the probe that allocates three 1 GB processes;
``--simulate-no-namespaces`` shows what is left on a machine where ``unshare`` is not permitted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.tools import ToolError
from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.editor import Editor
from trace_envs.swe.env import SWEBenchEnv
from trace_envs.swe.local_tasks import build_task_repo
from trace_envs.swe.sandbox import SandboxLimits
from trace_envs.swe.task import load_task_repo

TASK = "local__textkit-1"
Result = tuple[bool, str]  # (contained, how)


def bash(env: SWEBenchEnv, command: str) -> str:
    obs, *_ = env.step(format_tool_call("bash", {"command": command}))
    return obs[0]["content"]


def submit(env: SWEBenchEnv) -> float:
    _, reward, *_ = env.step(format_tool_call("submit", {}))
    return reward


def procs_with(arg: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                parts = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as fh:
                zombie = fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except (OSError, IndexError):
            continue
        if arg.encode() in parts and not zombie:
            found.append(int(name))
    return found


def sandbox_how(env: SWEBenchEnv, *keys: str) -> str:
    report = (env.episode.sandbox_info() if hasattr(env.episode, "sandbox_info") else {}) if env.episode else {}
    on = [k for k in keys if report.get(k)]
    return ", ".join(on) if on else "no confinement reported"


def probe_gold_local() -> Result:
    env = SWEBenchEnv(dataset="local", backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        out = bash(env, "find / -name gold.patch 2>/dev/null | grep textkit | head -1 | xargs -r cat; "
                        "cat /tmp/trace-swe-tasks-*/local_tasks/tasks/*textkit*/gold.patch 2>/dev/null; "
                        "for p in $(find / -name gold.patch 2>/dev/null | grep textkit); do git apply $p; done; true")
        reward = submit(env)
        seen = "diff --git" in out
        how = "gold patch only in memory (task files deleted after load); " + sandbox_how(env, "mount_namespace")
        return (not seen and reward == 0.0), how if not seen and reward == 0.0 else f"read={seen} reward={reward}"
    finally:
        env.close()


def probe_gold_task_repo(repo: Path) -> Result:
    env = SWEBenchEnv(dataset=str(repo), backend="local")
    gold = repo / "tasks" / TASK / "gold.patch"
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        found = bash(env, "find / -name gold.patch 2>/dev/null; true")
        out = bash(env, f"cat {gold}; git apply {gold}; true")
        reward = submit(env)
        seen = "diff --git" in out or "gold.patch" in found
        ok = not seen and reward == 0.0
        return ok, ("task dir not in the agent's root (" + sandbox_how(env, "mount_namespace") + ")") if ok else \
            f"found/read={seen} reward={reward}"
    finally:
        env.close()


def probe_write_outside(repo: Path, tmp: Path) -> Result:
    env = SWEBenchEnv(dataset=str(repo), backend="local")
    targets = [tmp / "escape.txt", Path("/usr/local/escape-probe.txt"), Path("/etc/escape-probe.txt"),
               repo / "tasks" / TASK / "repo" / "escape.txt"]
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        bash(env, " ; ".join(f"echo pwned > {shlex.quote(str(t))}" for t in targets)
             + "; mount -o remount,rw /usr; touch /usr/local/escape-probe.txt; true")
        leaked = [str(t) for t in targets if t.exists()]
        for t in leaked:
            Path(t).unlink()
        return (not leaked), ("read-only jail root, host paths absent (" + sandbox_how(env, "mount_namespace",
                                                                                      "capabilities_dropped") + ")"
                              if not leaked else "wrote " + ", ".join(leaked))
    finally:
        env.close()


def probe_symlink_editor(repo: Path, tmp: Path) -> Result:
    secret = tmp / "host-secret.txt"
    secret.write_text("host secret\n")
    backend = LocalBackend()
    backend.start(next(t for t in load_task_repo(repo) if t.instance_id == TASK))
    editor = Editor(backend)
    got = []
    try:
        backend.run(f"ln -s {secret} s; ln -s {tmp} d; ln -s / r")
        for command, path, kw in [("view", "s", {}), ("str_replace", "s", {"old_str": "host", "new_str": "agent"}),
                                  ("create", "d/new.txt", {"file_text": "x"}), ("view", f"r{secret}", {})]:
            try:
                out = editor(command, path, **kw)
                got.append(f"{command} {path}: {out[:40]!r}")
            except ToolError:
                pass
    finally:
        backend.close()
    leaked = got or secret.read_text() != "host secret\n" or (tmp / "new.txt").exists()
    return (not leaked), ("editor resolves symlinks and refuses paths outside the repo" if not leaked
                          else "; ".join(got))


def probe_unix_socket(repo: Path, tmp: Path) -> Result:
    path = tmp / "host.sock"
    listeners = []
    for addr in (str(path), f"\0trace-probe-{os.getpid()}"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(addr)
        s.listen(4)
        s.setblocking(False)
        listeners.append(s)
    code = ("import socket\nfor a in (%r, %r):\n    s = socket.socket(socket.AF_UNIX)\n    try:\n"
            "        s.connect(a); print('CONNECTED')\n    except OSError as e:\n        print('refused', e)\n"
            % (str(path), f"\0trace-probe-{os.getpid()}"))
    env = SWEBenchEnv(dataset=str(repo), backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        out = bash(env, f"python -c {shlex.quote(code)}")
        accepted = 0
        for s in listeners:
            try:
                s.accept()
                accepted += 1
            except BlockingIOError:
                pass
        ok = accepted == 0 and "CONNECTED" not in out
        return ok, ("socket file not in the jail; abstract socket in another network namespace ("
                    + sandbox_how(env, "mount_namespace", "network_namespace") + ")") if ok else \
            f"{accepted} host listener(s) accepted a connection"
    finally:
        env.close()
        for s in listeners:
            s.close()


def probe_setsid(repo: Path) -> Result:
    env = SWEBenchEnv(dataset=str(repo), backend="local")
    marks = ["27181", "27182", "27183"]
    try:
        _, info = env.reset(seed=0, options={"instance_id": TASK})
        cleanup = info.get("sandbox", {}).get("process_cleanup", "none reported")
        bash(env, f"setsid sleep {marks[0]} >/dev/null 2>&1 & disown; nohup sleep {marks[1]} >/dev/null 2>&1 & "
                  f"(setsid sh -c 'sleep {marks[2]}' >/dev/null 2>&1 &); true")
        after_step = sum(len(procs_with(m)) for m in marks)
        env.close()
        after_close = sum(len(procs_with(m)) for m in marks)
        return (after_step == 0 and after_close == 0), (
            f"killed at the end of the step ({cleanup})" if after_step == 0 else
            f"{after_step} survived the step, {after_close} survived close()")
    finally:
        env.close()
        for m in marks:
            for pid in procs_with(m):
                os.kill(pid, 9)


def probe_memory(repo: Path) -> Result:
    env = SWEBenchEnv(dataset=str(repo), backend="local")  # default limits: 2048 MB
    hog = "python -c \"import sys, time; b = b'x' * (1 << 30); time.sleep(3); print('held', sys.argv[1])\""
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        out = bash(env, " ".join(f"{hog} {i} &" for i in range(3)) + " wait")
        held = out.count("held ")
        ok = held < 3
        return ok, (f"{held}/3 completed; " + (out.split("[sandbox] ")[-1].split("\n")[0] if "[sandbox]" in out
                                                else "no total limit")) if ok else "all three 1 GB processes ran"
    finally:
        env.close()


def probe_edit_source(repo: Path) -> Result:
    source = repo / "tasks" / TASK / "repo" / "textkit" / "shorten.py"
    pristine = source.read_text()
    env = SWEBenchEnv(dataset=str(repo), backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        bash(env, f"echo '# agent edit' >> {source}")
        agent_reached = source.read_text() != pristine
        if not agent_reached:  # simulate an unconfined agent: edit it from outside
            with source.open("a") as fh:
                fh.write("# edited\n")
        try:
            submit(env)
            for _ in range(2):
                env.reset(seed=0, options={"instance_id": TASK})
                if env.episode.backend.read_file("textkit/shorten.py") != pristine:
                    return False, "a later reset did not start from the pristine tree"
        except ValueError as exc:
            return False, f"ValueError: {str(exc)[:60]}"
        return True, ("source not reachable by bash; " if not agent_reached else "") + \
            "episodes check out a pinned pristine copy (submit + 2 resets fine)"
    finally:
        env.close()
        source.write_text(pristine)


def probe_git_fsmonitor(repo: Path, tmp: Path) -> Result:
    marker = tmp / "fsmonitor-ran"
    env = SWEBenchEnv(dataset=str(repo), backend="local")
    try:
        env.reset(seed=0, options={"instance_id": TASK})
        bash(env, f"git config core.fsmonitor 'touch {marker}; false'; echo x >> README.md")
        submit(env)
        ran = marker.exists()
        return (not ran), ("the submission diff runs inside the sandbox" if not ran else
                           "a git hook of the agent ran on the host")
    finally:
        env.close()


def run_probe(name: str, fn: Callable[[], Result]) -> tuple[str, str, str, str]:
    t0 = time.perf_counter()
    try:
        contained, how = fn()
        tried = "yes"
    except Exception as exc:  # noqa: BLE001 - a probe that blows up the env is reported, not contained
        contained, how, tried = False, f"{type(exc).__name__}: {str(exc)[:70]}", "yes"
        traceback.print_exc(file=sys.stderr)
    return name, tried, "yes" if contained else "NO", f"{how} [{time.perf_counter() - t0:.1f}s]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--simulate-no-namespaces", action="store_true")
    args = parser.parse_args()
    if args.simulate_no_namespaces:
        from trace_envs.swe import confinement  # noqa: PLC0415

        none = confinement.Availability(errors={f: "simulated" for f in confinement.FEATURES})
        confinement.available = lambda: none
    with tempfile.TemporaryDirectory(prefix="escape-probes-") as d:
        tmp = Path(d)
        repo = build_task_repo(tmp / "task_repo")
        outside = tmp / "outside"
        outside.mkdir()
        probes: list[tuple[str, Callable[[], Result]]] = [
            ("read gold patch (dataset=local)", probe_gold_local),
            ("read gold patch (task repo on disk)", lambda: probe_gold_task_repo(repo)),
            ("write outside the workspace", lambda: probe_write_outside(repo, outside)),
            ("symlink via the editor", lambda: probe_symlink_editor(repo, outside)),
            ("Unix socket to a host listener", lambda: probe_unix_socket(repo, outside)),
            ("setsid/nohup/disown survivor", lambda: probe_setsid(repo)),
            ("three 1 GB processes at once", lambda: probe_memory(repo)),
            ("edit task source, submit, reset x2", lambda: probe_edit_source(repo)),
            ("git fsmonitor hook run by the grader", lambda: probe_git_fsmonitor(repo, outside)),
        ]
        if args.skip_memory:
            probes = [p for p in probes if not p[0].startswith("three")]
        rows = [run_probe(name, fn) for name, fn in probes]
    report = {}
    try:
        report = LocalBackend(SandboxLimits()).sandbox_info()
    except AttributeError:
        pass
    print(f"sandbox: {report or 'no report (old sandbox)'}")
    widths = [max(len(r[i]) for r in [("probe", "tried", "contained", "how"), *rows]) for i in range(4)]
    for row in [("probe", "tried", "contained", "how"), tuple("-" * w for w in widths), *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(f"\ncontained {sum(r[2] == 'yes' for r in rows)}/{len(rows)} probes")


if __name__ == "__main__":
    main()
