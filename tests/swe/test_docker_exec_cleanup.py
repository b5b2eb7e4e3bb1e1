"""Docker backend: a command leaves no process behind in the container (as the local sandbox), PID 1 excepted.

Run for real through the stand-in ``docker`` of conftest: each "container" is a PID namespace whose PID 1 is
``tail -f /dev/null`` (as ``docker_run_argv`` starts it) and each ``docker exec`` runs the backend's script in it, its
parent outside; what is left there is read from this machine's ``/proc``.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from trace_envs.swe import docker_backend
from trace_envs.swe.docker_backend import DockerBackend, container_script
from trace_envs.swe.sandbox import SandboxLimits

DETACH = "setsid sleep 1000 >/dev/null 2>&1 & nohup sleep 1001 >/dev/null 2>&1 & "
# a daemon the usual way (double fork, new session); the command waits until it runs
DAEMON = "(setsid sh -c 'sleep 1002 & echo $! > daemon.pid' &); while [ ! -s daemon.pid ]; do sleep 0.02; done; "


def container_processes(tmp_path: Path, name: str = "fake") -> tuple[int, list[str]]:
    """``(host pid of the container's PID 1, command lines of its other live processes)``; dead ones (zombies that
    ``tail`` never reaps, as in Docker) are not counted."""
    init = int((tmp_path / "containers" / name).read_text())
    ns = os.readlink(f"/proc/{init}/ns/pid")
    live = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == init:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            live.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
        except (OSError, ValueError):  # gone meanwhile
            continue
    return init, live


def left_behind(tmp_path: Path, name: str = "fake") -> list[str]:
    """The container's live processes but PID 1, once SIGKILLs sent had time to land (up to 5 s); PID 1 must be
    alive and still the namespace's PID 1."""
    deadline = time.monotonic() + 5
    while True:
        init, live = container_processes(tmp_path, name)
        if not live or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    status = Path(f"/proc/{init}/status").read_text()
    assert "\nState:\tS" in status and Path(f"/proc/{init}/comm").read_text().strip() == "tail"
    assert next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1] == "1"
    return live


@pytest.fixture()
def backend(fake_docker_cli):
    b = DockerBackend(SandboxLimits(timeout_s=20))
    b.container = "fake"
    yield b
    b.close()  # `docker rm -f`: the stand-in ends the namespace


def test_detached_processes_do_not_outlive_their_command(backend, fake_docker_cli):
    res = backend.run(DETACH + DAEMON + "echo started")
    assert (res.returncode, res.timed_out, res.output) == (0, False, "started\n")
    assert left_behind(fake_docker_cli) == []
    assert backend.run("echo next").output == "next\n"  # the container (its PID 1) lives on


def test_exit_status_and_output_are_the_commands(backend, fake_docker_cli):
    res = backend.run(DETACH + "echo out; echo err >&2; exit 3")
    assert (res.returncode, res.timed_out, res.output) == (3, False, "out\nerr\n")
    assert backend.run("true").returncode == 0
    assert left_behind(fake_docker_cli) == []


def test_a_timed_out_command_reads_timed_out_and_leaves_nothing(backend, fake_docker_cli):
    started = time.monotonic()
    res = backend.run(DETACH + DAEMON + "echo before; sleep 100", timeout_s=1)
    assert res.timed_out and res.returncode == 137 and res.output == "before\n"  # no shell "Killed" notice
    assert time.monotonic() - started < 15
    assert left_behind(fake_docker_cli) == []


def test_reads_writes_and_diffs_leave_nothing(backend, fake_docker_cli):
    assert backend._exec_bytes(DETACH + "printf 'da\\0ta'") == (0, b"da\0ta", "")
    assert left_behind(fake_docker_cli) == []
    backend.write_file("sub/a.txt", "hello\n")  # `docker exec -i`: the text on stdin
    assert backend.read_file("sub/a.txt") == "hello\n"
    assert (fake_docker_cli / "testbed" / "sub" / "a.txt").read_text() == "hello\n"
    assert left_behind(fake_docker_cli) == []


def test_a_docker_exec_killed_on_the_host_leaves_nothing(backend, fake_docker_cli, monkeypatch):
    # the host gives up on `docker exec` (here after 1 s, not the deadline + 30 s): its command goes on in the
    # container until a separate exec ends it
    real = docker_backend.run_bounded
    monkeypatch.setattr(docker_backend, "run_bounded", lambda argv, timeout_s, *a, **k: real(argv, 1, *a, **k))
    res = backend.run(DETACH + "echo before; sleep 100", timeout_s=60)
    assert res.timed_out and res.returncode == -9
    assert left_behind(fake_docker_cli) == []
    assert backend._exec_bytes(DETACH + "sleep 100")[0] == -9
    assert left_behind(fake_docker_cli) == []


def test_the_script_kills_nothing_where_pid_1_is_not_the_containers_tail(fake_docker_cli):
    """Run where PID 1 is not the container's ``tail`` (as on a host, here a namespace whose PID 1 is a shell), the
    script runs the command and kills none of the other processes (``fake_docker_cli``: skipped like the others where
    there are no PID namespaces)."""
    userns = [] if os.getuid() == 0 else ["--user", "--map-root-user"]
    probe = 'sleep 1000 & s=$!; bash -c "$1"; echo "rc=$?"; kill -0 "$s" && echo survived; kill "$s"'
    out = subprocess.run(["unshare", *userns, "--pid", "--fork", "--mount-proc", "bash", "-c", probe, "_",
                          container_script("setsid sleep 1001 >/dev/null 2>&1 & exit 4", 10)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["rc=4", "survived"], out.stderr
