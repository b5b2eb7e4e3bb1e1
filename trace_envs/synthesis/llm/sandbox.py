"""Confined Python processes for LLM-written env modules: the dynamic check (``probe.py``, run once to its end)
and the env worker (``worker.py``, a persistent process behind ``confined_env.ConfinedEnv``).

Both are launched from one place, :func:`confine` + :meth:`Confinement.argv` (the launcher command line) and
``trace_envs.swe.sandbox.spawn`` (the process), with the SWE local sandbox's confinement: an empty working
directory, inputs in a private home, CPU-time, memory (per process and in total), file-size and process-count
limits, and, where the kernel allows it (``trace_envs.swe.confinement``), new user, mount, PID and network
namespaces inside a filesystem jail that shows only the system, Python and trace-rl directories read-only. Each
confinement the machine lacks is logged as a warning (once per process) and listed in the report; none is skipped
silently.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import generated_envs
import trace_envs
from trace_envs.swe import confinement as conf
from trace_envs.swe.sandbox import SandboxLimits, execute, sandbox_env
from trace_envs.synthesis.llm.config import ValidationLimits

logger = logging.getLogger(__name__)

_warned: set[tuple[str, str]] = set()
PROBE_MODULE = "trace_envs.synthesis.llm.probe"


@dataclass
class ProbeRun:
    """What came back from one confined probe run."""

    report: dict[str, Any] | None
    last_phase: str
    timed_out: bool
    killed: str | None
    returncode: int
    stderr: str
    sandbox: dict[str, Any] = field(default_factory=dict)


def _code_dirs() -> tuple[str, ...]:
    """The trace-rl directories a confined process imports (shown read-only inside the jail)."""
    return tuple(str(Path(m.__file__).resolve().parent) for m in (trace_envs, generated_envs))


def _warn_missing(report: conf.SandboxReport, who: str) -> None:
    for feature in report.unavailable:
        if (who, feature) not in _warned:
            _warned.add((who, feature))
            logger.warning("%s: %s is unavailable on this machine (%s); %s.", who, feature,
                           report.errors.get(feature) or "not available", conf.CONSEQUENCE[feature])


@dataclass
class Confinement:
    """The private tree, limits and environment of one confined process (removed by :meth:`cleanup`).

    ``dirs``: ``work`` (its empty working directory), ``home`` (its private home, where its inputs go),
    ``scratch`` (its ``/tmp``) and ``jailroot``, all under ``tmp``; ``home_seen`` is the home as the process sees it.
    """

    tmp: Path
    dirs: dict[str, Path]
    home_seen: Path
    avail: conf.Availability
    report: conf.SandboxReport
    limits: SandboxLimits
    token: str
    env: dict[str, str]

    def write_home(self, name: str, text: str) -> str:
        """Write ``text`` as ``name`` in the process's home; returns its path as the process sees it."""
        (self.dirs["home"] / name).write_text(text, encoding="utf-8")
        return str(self.home_seen / name)

    def argv(self, python_argv: list[str], status_fd: int) -> list[str]:
        """The launcher command line that runs ``python_argv`` (after the interpreter) confined; the launcher
        writes what it applied to ``status_fd`` (see ``trace_envs.swe.jail``)."""
        a, limits = self.avail, self.limits
        spec = conf.launch_spec(self.dirs["jailroot"], self.dirs["work"], self.dirs["home"], self.dirs["scratch"],
                                False, mount_ns=a.mount_namespace, pid_ns=a.pid_namespace, user_ns=a.user_namespace,
                                nproc=limits.max_processes + 4 if conf.nproc_rlimit_applies(a) else None,
                                extra_ro=limits.ro_paths)
        spec["net_ns"] = a.network_namespace
        spec["status_fd"] = status_fd
        return conf.launcher_argv(spec, [sys.executable, *python_argv])

    @property
    def scan(self) -> bool:
        """Whether the process's descendants must be found by a /proc scan (no PID namespace)."""
        return not self.avail.pid_namespace

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def confine(limits: ValidationLimits, who: str, prefix: str = "trace-llm-env-") -> Confinement:
    """A fresh :class:`Confinement` under ``limits`` (memory, file size, processes, wall clock); ``who`` names the
    process in the warnings about confinements this machine lacks."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        dirs = {name: tmp / name for name in ("work", "home", "scratch", "jailroot")}
        for d in dirs.values():
            d.mkdir()
        avail = conf.available()
        report = conf.make_report(avail, False, limits.memory_mb, limits.max_processes)
        _warn_missing(report, who)
        home_seen = Path(conf.JAIL_HOME) if avail.mount_namespace else dirs["home"]
        sandbox_limits = SandboxLimits(timeout_s=limits.timeout_s, memory_mb=limits.memory_mb,
                                       file_size_mb=limits.file_size_mb, max_output_chars=2_000_000,
                                       network=False, max_processes=limits.max_processes, ro_paths=_code_dirs())
        token = secrets.token_hex(12)
        env = {**sandbox_env(home_seen), conf.TOKEN_VAR: token, "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Confinement(tmp, dirs, home_seen, avail, report, sandbox_limits, token, env)


def run_probe(source: str, capability: str, domain: str, limits: ValidationLimits) -> ProbeRun:
    """Play ``source`` in the confined probe; returns what it measured (the host judges it)."""
    box = confine(limits, "LLM env validator")
    try:
        nonce = secrets.token_hex(16)
        module_path = box.write_home("candidate.py", source)
        cfg = {"nonce": nonce, "module_path": module_path, "capability": capability,
               "domain": domain, "n_seeds": limits.n_seeds, "baseline_seeds": limits.baseline_seeds,
               "determinism_seeds": limits.determinism_seeds, "random_turns": limits.random_turns}
        cfg_path = box.write_home("probe.json", json.dumps(cfg))
        r, w = os.pipe()
        try:
            argv = box.argv(["-I", "-m", PROBE_MODULE, cfg_path], w)
            res = execute(argv, box.dirs["work"], box.env, box.limits, limits.timeout_s, box.token,
                          scan=box.scan, merge_stderr=False, pass_fds=(w,))
            os.close(w)
            w = -1
            conf.read_all(r)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
    finally:
        box.cleanup()
    doc, last = None, "start (the probe never reported)"
    for line in res.output.splitlines():
        if not line.startswith(nonce + " "):
            continue
        kind, _, rest = line[len(nonce) + 1:].partition(" ")
        if kind == "PHASE":
            last = rest
        elif kind == "REPORT":
            try:
                doc = json.loads(rest)
            except json.JSONDecodeError:
                doc = None
    return ProbeRun(doc, last, res.timed_out, res.killed, res.returncode, res.stderr[-3000:], box.report.as_dict())
