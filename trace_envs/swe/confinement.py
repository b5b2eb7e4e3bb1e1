"""What the local sandbox can confine on this machine, the jail layout, and control of the sandbox's processes.

``available()`` probes once per process (running ``jail.py`` in probe mode on a throwaway workspace)
which confinements the kernel allows: user, mount (the filesystem jail), PID and network namespaces,
a fresh ``/proc``, dropped capabilities. ``SandboxReport`` says what is in force for a workspace; every
confinement that is missing is logged as a warning (once per process) and listed in the report, which
the env puts in ``info["sandbox"]``. The total-memory and process-count limits are enforced by a
watchdog that polls the sandbox's processes (``SandboxProcesses``); ``RLIMIT_AS`` still caps each
process, and ``RLIMIT_NPROC`` is added where it binds (a non-root user inside a user namespace).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

JAIL_SCRIPT = Path(__file__).with_name("jail.py")
JAIL_WORKDIR = "/testbed"
JAIL_HOME = "/home/agent"
TOKEN_VAR = "TRACE_SWE_SANDBOX"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = ("passwd", "group", "hosts", "hostname", "nsswitch.conf", "host.conf", "ld.so.cache", "ld.so.conf",
               "ld.so.conf.d", "alternatives", "localtime", "timezone", "ssl", "ca-certificates",
               "ca-certificates.conf", "mime.types", "protocols", "services", "inputrc", "bash.bashrc", "profile",
               "magic", "os-release", "debian_version", "login.defs", "python3", "python3.11", "python3.12")
# trace-rl's own packages (the local tasks' gold fixes and hidden tests, the code-localization data): hidden in
# the jail when they live under a directory it shows (a wheel install puts them in the venv's site-packages)
HIDDEN_PACKAGES = ("trace_envs", "trace_train", "trace_moe", "generated_envs", "trace_rl_assets")
FEATURES = ("user_namespace", "mount_namespace", "pid_namespace", "network_namespace", "proc", "caps_dropped")
CONSEQUENCE = {
    "user_namespace": "namespaces need CAP_SYS_ADMIN instead",
    "mount_namespace": "the agent's commands see (and as root may write) the whole host filesystem, task "
                       "directories and grading material included",
    "pid_namespace": "background processes are found by an /proc scan (an agent that clears its environment "
                     "escapes it) and the agent's commands see, and may signal, the host's processes",
    "network_namespace": "the agent's commands have the host's network and abstract Unix sockets",
    "proc": "the agent's commands have no /proc",
    "caps_dropped": "the agent's commands keep their capabilities (they could remount the jail read-write)",
}


@dataclass(frozen=True)
class Availability:
    """Which confinements this machine allows (``errors``: why each missing one failed)."""

    user_namespace: bool = False
    mount_namespace: bool = False
    pid_namespace: bool = False
    network_namespace: bool = False
    proc: bool = False
    caps_dropped: bool = False
    errors: dict[str, str] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def available() -> Availability:
    """Probe the confinements once per process (a real launch of ``jail.py`` running ``true``)."""
    if not sys.platform.startswith("linux"):
        return Availability(errors={f: f"not Linux ({sys.platform})" for f in FEATURES})
    with tempfile.TemporaryDirectory(prefix="trace-swe-probe-") as tmp:
        dirs = {name: Path(tmp) / name for name in ("jailroot", "repo", "home", "tmp")}
        for d in dirs.values():
            d.mkdir()
        spec = launch_spec(dirs["jailroot"], dirs["repo"], dirs["home"], dirs["tmp"], network=False,
                           mount_ns=True, pid_ns=True)
        spec["probe"] = True
        try:
            status = run_probe(spec)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            return Availability(errors={f: f"the probe could not run: {exc}" for f in FEATURES})
    errors = dict(status.get("errors", {}))
    flags = {f: bool(status.get(f)) for f in FEATURES}
    flags["mount_namespace"] = flags["mount_namespace"] and bool(status.get("jail"))
    flags["proc"] = flags["proc"] and flags["mount_namespace"]
    if status.get("jail") is False and "jail" in errors:
        errors["mount_namespace"] = errors.pop("jail")
    for f in FEATURES:
        if not flags[f] and f not in errors:
            errors[f] = "not available"
    return Availability(**flags, errors={k: v for k, v in errors.items() if k in FEATURES and not flags[k]})


def run_probe(spec: dict) -> dict:
    """Run ``true`` through the launcher with ``spec``; returns the launcher's status object."""
    r, w = os.pipe()
    try:
        spec = {**spec, "status_fd": w}
        argv = launcher_argv(spec, ["true"])
        res = subprocess.run(argv, pass_fds=(w,), capture_output=True, timeout=30, env=base_env(Path("/")))
        os.close(w)
        w = -1
        raw = read_all(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    if not raw:
        raise ValueError(f"no status from the launcher (exit {res.returncode}): {res.stderr.decode(errors='replace')}")
    return json.loads(raw)


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def launcher_argv(spec: dict, argv: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", str(JAIL_SCRIPT), json.dumps(spec), "--", *argv]


def base_env(home: Path) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}


def _python_dirs() -> list[str]:
    """The interpreter's directories (venv and base install), as given and resolved."""
    exe_dir = os.path.dirname(os.path.realpath(sys.executable))
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, exe_dir,
            os.path.dirname(sys.executable)}
    dirs |= {os.path.realpath(d) for d in dirs}
    return sorted(d for d in dirs if os.path.isdir(d))


@functools.lru_cache(maxsize=8)
def package_dirs(names: tuple[str, ...] = HIDDEN_PACKAGES) -> tuple[str, ...]:
    """The directories the packages ``names`` are imported from (resolved; those not installed are left out)."""
    dirs = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for loc in (spec.submodule_search_locations or []) if spec is not None else []:
            if os.path.isdir(loc):
                dirs.append(os.path.realpath(loc))
    return tuple(sorted(set(dirs)))


def _hidden(ro: list[list[str]], extra_ro: tuple[str, ...]) -> list[str]:
    """Where ``package_dirs()`` appear inside the jail through the binds ``ro`` (``[host, jail]`` pairs).

    A package directory that ``extra_ro`` names itself (or something inside it) is shown, as asked.
    """
    asked = [os.path.realpath(p) for p in extra_ro]
    seen = []
    for pkg in package_dirs():
        if any(a == pkg or a.startswith(pkg + "/") for a in asked):
            continue
        for src, dst in ro:
            src = os.path.realpath(src)
            if pkg == src or pkg.startswith(src.rstrip("/") + "/"):
                seen.append(dst.rstrip("/") + pkg[len(src.rstrip("/")):] if pkg != src else dst)
    return sorted(set(seen))


def jail_layout(repo: Path, home: Path, tmp: Path, extra_ro: tuple[str, ...] = (), empty: Path | None = None) -> dict:
    """Links and binds of the agent's root: system + Python read-only, workspace/home/tmp read-write.

    ``empty`` (an empty host directory) is bound read-only over trace-rl's own packages wherever a read-only
    bind would show them (``HIDDEN_PACKAGES``); a layout that would show them without ``empty`` is refused.
    """
    links, ro = [], []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links.append([d, os.readlink(d)])
        elif os.path.isdir(d):
            ro.append([d, d])
    for name in ETC_ENTRIES:
        p = f"/etc/{name}"
        if os.path.islink(p):
            links.append([p, os.readlink(p)])
        elif os.path.exists(p):
            ro.append([p, p])
    covered = [d for d, _ in ro]
    for d in [*_python_dirs(), *extra_ro]:
        if os.path.exists(d) and not any(d == c or d.startswith(c.rstrip("/") + "/") for c in covered):
            ro.append([os.path.realpath(d), d])
            covered.append(d)
    hide = _hidden(ro, extra_ro)
    if hide and empty is None:
        raise ValueError(f"the jail would show trace-rl's packages ({', '.join(hide)}) and has no directory to hide "
                         "them with")
    ro += [[str(empty), d] for d in hide]
    rw = [[str(repo), JAIL_WORKDIR], [str(home), JAIL_HOME], [str(tmp), "/tmp"]]
    return {"links": links, "ro": ro, "rw": rw}


def launch_spec(jail_root: Path, repo: Path, home: Path, tmp: Path, network: bool, mount_ns: bool, pid_ns: bool,
                user_ns: bool = True, nproc: int | None = None, extra_ro: tuple[str, ...] = ()) -> dict:
    """The launcher's spec (see ``jail.py``) for one command; makes an empty dir ``jail-empty`` beside ``jail_root``."""
    jail = None
    if mount_ns:
        empty = Path(jail_root).parent / "jail-empty"  # bound over trace-rl's packages (see ``jail_layout``)
        empty.mkdir(exist_ok=True)
        jail = {"root": str(jail_root), **jail_layout(repo, home, tmp, extra_ro, empty)}
    return {"user_ns": user_ns, "mount_ns": mount_ns, "pid_ns": pid_ns, "net_ns": not network, "jail": jail,
            "cwd": JAIL_WORKDIR if jail else str(repo), "drop_caps": True, "block_userns": True, "nproc": nproc}


@dataclass(frozen=True)
class SandboxReport:
    """What confines one workspace's commands (``info["sandbox"]``); ``unavailable`` lists what is missing."""

    backend: str
    user_namespace: bool
    mount_namespace: bool
    pid_namespace: bool
    network_namespace: bool
    capabilities_dropped: bool
    proc: bool
    network: str
    process_cleanup: str
    memory_limit: str
    process_limit: str
    nproc_rlimit_enforced: bool
    unavailable: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


_warned: set[str] = set()


def nproc_rlimit_applies(avail: Availability) -> bool:
    """RLIMIT_NPROC binds only non-root users, and counts per sandbox only inside a user namespace."""
    return avail.user_namespace and os.geteuid() != 0


def make_report(avail: Availability, network: bool, memory_mb: int, max_processes: int) -> SandboxReport:
    """The report for a workspace with these limits; logs a warning per missing confinement (once per process)."""
    net_ns = avail.network_namespace and not network
    unavailable = [f for f in FEATURES if not getattr(avail, f) and not (f == "network_namespace" and network)]
    if not avail.mount_namespace and "proc" in unavailable:
        unavailable.remove("proc")  # no jail: the host's /proc is there
    for f in unavailable:
        if f not in _warned:
            _warned.add(f)
            log.warning("SWE local sandbox: %s is unavailable (%s); %s.", f, avail.errors.get(f, "not available"),
                        CONSEQUENCE[f])
    nproc_enforced = nproc_rlimit_applies(avail)
    return SandboxReport(
        backend="local", user_namespace=avail.user_namespace, mount_namespace=avail.mount_namespace,
        pid_namespace=avail.pid_namespace, network_namespace=net_ns, capabilities_dropped=avail.caps_dropped,
        proc=avail.proc if avail.mount_namespace else True,
        network="isolated" if net_ns else ("host (allowed by config)" if network else "host (isolation unavailable)"),
        process_cleanup="pid_namespace" if avail.pid_namespace else "process_scan",
        memory_limit=f"total {memory_mb} MB (watchdog) + RLIMIT_AS {memory_mb} MB per process",
        process_limit=f"{max_processes} processes (watchdog)" + (" + RLIMIT_NPROC" if nproc_enforced else ""),
        nproc_rlimit_enforced=nproc_enforced, unavailable=unavailable,
        errors={f: avail.errors.get(f, "") for f in unavailable},
    )


class SandboxProcesses:
    """The processes of one command: its process tree, plus (without a PID namespace) those carrying the token."""

    def __init__(self, root_pid: int, token: str, scan: bool):
        self.root_pid, self.scan = root_pid, scan
        self.marker = f"{TOKEN_VAR}={token}".encode()

    def pids(self) -> set[int]:
        found = descendants(self.root_pid)
        if self.scan:
            found |= token_pids(self.marker)
        found.discard(os.getpid())
        return found

    def kill(self) -> None:
        """SIGKILL the group, then everything found, until nothing is left (bounded retries against forks)."""
        try:
            os.killpg(self.root_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for _ in range(20):
            pids = self.pids() - {self.root_pid} if not _alive(self.root_pid) else self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> set[int]:
    """``pid`` and its live descendants (``/proc/<pid>/task/<tid>/children``)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in out or not _alive(p):
            continue
        out.add(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except OSError:
                continue
    return out


def token_pids(marker: bytes) -> set[int]:
    """Live processes whose environment holds ``marker`` (``NAME=value``)."""
    out = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if marker + b"\0" in env or env.endswith(marker):
            pid = int(name)
            if _alive(pid):
                out.add(pid)
    return out


def _smaps_rollup_bytes(pid: int) -> int | None:
    """Proportional anonymous + shared-memory (shmem, memfd, ``MAP_SHARED|MAP_ANONYMOUS``) set of ``pid``, in bytes.

    ``Pss_Anon + Pss_Shmem + SwapPss`` where the kernel breaks PSS down, else the whole ``Pss``; ``None`` when
    ``smaps_rollup`` cannot be read. Pages shared between processes count once in the sum (PSS splits them).
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    kb: dict[bytes, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(b":") and parts[1].isdigit():
            kb[parts[0][:-1]] = int(parts[1])
    if b"Pss_Anon" in kb:
        return (kb[b"Pss_Anon"] + kb.get(b"Pss_Shmem", 0) + kb.get(b"SwapPss", 0)) * 1024
    return kb[b"Pss"] * 1024 if b"Pss" in kb else None


def anon_memory_bytes(pids: set[int]) -> int:
    """Memory the processes ``pids`` hold, summed: their PSS of anonymous *and* shared anonymous memory.

    Shared anonymous memory (``mmap(-1, n)``, memfd, ``/dev/shm`` mappings) counts too, split between the
    processes that share it. Where ``smaps_rollup`` is unreadable, the whole resident set (``statm``) counts.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        used = _smaps_rollup_bytes(pid)
        if used is None:
            try:
                with open(f"/proc/{pid}/statm") as fh:
                    used = int(fh.read().split()[1]) * page
            except (OSError, IndexError, ValueError):
                continue
        total += used
    return total
