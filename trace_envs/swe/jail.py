"""In-namespace launcher of the local sandbox (run as ``python -I -S jail.py SPEC -- argv...``; stdlib only).

It unshares the namespaces ``SPEC`` asks for (user, mount, PID, network), forks the process that
becomes PID 1 of the new PID namespace, builds a new root there (a read-only tmpfs with read-only
binds of the system and Python directories, the workspace bound read-write, a private ``/dev`` and
``/proc``), ``pivot_root``s into it and detaches the old root, so nothing else of the host's
filesystem (task directories, grading material, sockets, ``/run``) exists in the agent's view. PID 1
then forks the command with an empty capability bounding set and ``no_new_privs`` and waits for it;
when PID 1 exits the kernel kills every process left in the namespace, so nothing survives the call.

What was actually applied is written as one JSON object to ``SPEC["status_fd"]``. With
``SPEC["probe"]`` every step is optional (failures are reported, not fatal); otherwise any failure
exits with status 125 and a message on stderr, before the command runs.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91, "ppc64le": 184, "s390x": 185}
# statvfs flag -> mount flag: flags a bind mount must keep when it is remounted read-only in a user namespace
ST_TO_MS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC), (1024, MS_NOATIME),
            (2048, MS_NODIRATIME), (4096, MS_RELATIME))
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))
EXIT_SETUP_FAILED = 125

libc = ctypes.CDLL(None, use_errno=True)


class SetupError(RuntimeError):
    pass


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)} (errno {err})")


def _enc(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(_enc(src), _enc(dst), _enc(fstype), ctypes.c_ulong(flags), _enc(data)),
           f"mount {src or fstype} on {dst}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _unshare(flag: int, what: str) -> None:
    _check(libc.unshare(flag), f"unshare({what})")


def enter_user_namespace() -> None:
    """New user namespace where the caller is root (uid/gid 0 mapped to the caller's own ids)."""
    uid, gid = os.geteuid(), os.getegid()
    _unshare(CLONE_NEWUSER, "user")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")


def _mountpoint(path: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            open(path, "w").close()


def bind(src: str, dst: str, readonly: bool) -> None:
    """Bind ``src`` on ``dst`` (created); read-only binds keep the source's locked flags."""
    _mountpoint(dst, os.path.isdir(src))
    _mount(src, dst, None, MS_BIND | MS_REC)
    if readonly:
        vfs = os.statvfs(src).f_flag
        keep = 0
        for st, ms in ST_TO_MS:
            if vfs & st:
                keep |= ms
        _mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def build_root(jail: dict, pid_ns: bool, status: dict) -> None:
    """Assemble the new root under ``jail['root']`` and pivot into it."""
    root = jail["root"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for link, target in jail.get("links", []):
        _mountpoint(os.path.dirname(root + link), True)
        os.symlink(target, root + link)
    binds = [(src, dst, True) for src, dst in jail.get("ro", [])] + [(s, d, False) for s, d in jail.get("rw", [])]
    for src, dst, readonly in sorted(binds, key=lambda b: b[1].rstrip("/").count("/")):  # parents first
        bind(src, root + dst, readonly)
    dev = root + "/dev"
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for node in DEV_NODES:
        if os.path.exists("/dev/" + node):
            bind("/dev/" + node, f"{dev}/{node}", readonly=False)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{dev}/{name}")
    os.makedirs(dev + "/shm")
    _mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={jail.get('shm_mb', 64)}m")
    status["proc"] = False
    if pid_ns:  # a fresh procfs must be mounted while the host's /proc is still visible
        os.makedirs(root + "/proc", exist_ok=True)
        try:
            _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            status["proc"] = True
        except SetupError as exc:
            status["errors"]["proc"] = str(exc)
            if jail.get("require_proc"):
                raise
    for path in jail.get("dirs", []):
        os.makedirs(root + path, exist_ok=True)
    nr = SYS_PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise SetupError(f"pivot_root: unknown syscall number on {platform.machine()}")
    os.chdir(root)
    _check(libc.syscall(nr, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_capabilities() -> None:
    """Empty bounding, ambient and inheritable sets plus ``no_new_privs``: the command execs with no capability."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read()) if os.path.exists("/proc/sys/kernel/cap_last_cap") \
        else 63
    for cap in range(last + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    nr = SYS_CAPSET.get(platform.machine())
    if nr is not None:  # clear the inheritable set too (root regains bounding & inheritable caps at exec)
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        _check(libc.syscall(nr, header, data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def which(name: str) -> str:
    """PATH lookup without imports (``os.execvpe`` imports modules, which may not exist in the new root)."""
    if "/" in name:
        return name
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        cand = f"{d}/{name}"
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise FileNotFoundError(f"{name}: command not found")


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def run_init(spec: dict, argv: list[str], status: dict, status_fd: int) -> None:
    """PID 1 of the sandbox: set up the root, start the command, reap everything, exit with its status."""
    strict = not spec.get("probe")
    if spec.get("mount_ns") and spec.get("jail"):
        try:
            build_root(spec["jail"], status["pid_namespace"], status)
            status["jail"] = True
        except (SetupError, OSError) as exc:
            status["errors"]["jail"] = str(exc)
            if strict:
                raise SetupError(f"filesystem jail: {exc}") from None
    if spec.get("block_userns") and status.get("proc"):
        try:  # no nested user namespaces: less kernel surface for the command
            _write("/proc/sys/user/max_user_namespaces", "0")
            status["nested_userns_blocked"] = True
        except OSError as exc:
            status["errors"]["nested_userns"] = str(exc)
    child = os.fork()
    if child == 0:
        try:
            os.close(status_fd)
            if spec.get("drop_caps", True):
                drop_capabilities()
            nproc = spec.get("nproc")
            if nproc:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            os.chdir(spec["cwd"])
            os.execve(which(argv[0]), argv, os.environ)
        except BaseException as exc:  # noqa: BLE001 - report and leave; never run unconfined
            os.write(2, f"sandbox: cannot start the command: {exc}\n".encode())
            os._exit(EXIT_SETUP_FAILED)
    status["caps_dropped"] = bool(spec.get("drop_caps", True))
    os.write(status_fd, json.dumps(status).encode())
    os.close(status_fd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        pid, st = os.waitpid(-1, 0)
        if pid == child:
            os._exit(_exit_code(st))


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    command = argv[argv.index("--") + 1:]
    status_fd = int(spec["status_fd"])
    os.set_inheritable(status_fd, False)
    strict = not spec.get("probe")
    status: dict = {"errors": {}, "user_namespace": False, "mount_namespace": False, "pid_namespace": False,
                    "network_namespace": False, "jail": False, "proc": False, "caps_dropped": False}
    steps = [("user_namespace", spec.get("user_ns"), enter_user_namespace),
             ("mount_namespace", spec.get("mount_ns"), lambda: _unshare(CLONE_NEWNS, "mount")),
             ("pid_namespace", spec.get("pid_ns"), lambda: _unshare(CLONE_NEWPID, "pid")),
             ("network_namespace", spec.get("net_ns"), lambda: _unshare(CLONE_NEWNET, "net"))]
    try:
        for key, wanted, fn in steps:
            if not wanted:
                continue
            try:
                fn()
                status[key] = True
            except (SetupError, OSError) as exc:
                status["errors"][key] = str(exc)
                if strict:
                    raise SetupError(f"{key}: {exc}") from None
        spec["mount_ns"] = status["mount_namespace"]
        parent = os.getpid()
        child = os.fork()
        if child == 0:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() not in (parent, 0):  # 0: the parent is outside our new PID namespace
                os._exit(EXIT_SETUP_FAILED)
            try:
                run_init(spec, command, status, status_fd)
            except (SetupError, OSError) as exc:
                os.write(2, f"sandbox setup failed: {exc}\n".encode())
                os._exit(EXIT_SETUP_FAILED)
        os.close(status_fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        _, st = os.waitpid(child, 0)
        os._exit(_exit_code(st))
    except SetupError as exc:
        os.write(2, f"sandbox setup failed: {exc}\n".encode())
        os._exit(EXIT_SETUP_FAILED)


if __name__ == "__main__":
    main(sys.argv)
