"""Run the dynamic check (``probe.py``) in a confined subprocess, with the SWE local sandbox's confinement.

The probe gets an empty working directory, its inputs in a private home, CPU-time, memory (per process
and in total), file-size and process-count limits, a wall-clock timeout, and, where the kernel allows
it (``trace_envs.swe.confinement``), new user, mount, PID and network namespaces inside a filesystem
jail that shows only the system, Python and trace-rl directories read-only. Each confinement the
machine lacks is logged as a warning and listed in the result; none is skipped silently.
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

_warned: set[str] = set()


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
    """The trace-rl directories the probe imports (shown read-only inside the jail)."""
    return tuple(str(Path(m.__file__).resolve().parent) for m in (trace_envs, generated_envs))


def _warn_missing(report: conf.SandboxReport) -> None:
    for feature in report.unavailable:
        if feature not in _warned:
            _warned.add(feature)
            logger.warning("LLM env validator: %s is unavailable on this machine (%s); %s.", feature,
                           report.errors.get(feature) or "not available", conf.CONSEQUENCE[feature])


def run_probe(source: str, capability: str, domain: str, limits: ValidationLimits) -> ProbeRun:
    """Play ``source`` in the confined probe; returns what it measured (the host judges it)."""
    tmp = Path(tempfile.mkdtemp(prefix="trace-llm-env-"))
    try:
        dirs = {name: tmp / name for name in ("work", "home", "scratch", "jailroot")}
        for d in dirs.values():
            d.mkdir()
        avail = conf.available()
        report = conf.make_report(avail, False, limits.memory_mb, limits.max_processes)
        _warn_missing(report)
        jailed = avail.mount_namespace
        home_seen = Path(conf.JAIL_HOME) if jailed else dirs["home"]
        nonce = secrets.token_hex(16)
        (dirs["home"] / "candidate.py").write_text(source, encoding="utf-8")
        cfg = {"nonce": nonce, "module_path": str(home_seen / "candidate.py"), "capability": capability,
               "domain": domain, "n_seeds": limits.n_seeds, "baseline_seeds": limits.baseline_seeds,
               "determinism_seeds": limits.determinism_seeds, "random_turns": limits.random_turns}
        (dirs["home"] / "probe.json").write_text(json.dumps(cfg), encoding="utf-8")
        sandbox_limits = SandboxLimits(timeout_s=limits.timeout_s, memory_mb=limits.memory_mb,
                                       file_size_mb=limits.file_size_mb, max_output_chars=2_000_000,
                                       network=False, max_processes=limits.max_processes, ro_paths=_code_dirs())
        spec = conf.launch_spec(dirs["jailroot"], dirs["work"], dirs["home"], dirs["scratch"], False,
                                mount_ns=avail.mount_namespace, pid_ns=avail.pid_namespace,
                                user_ns=avail.user_namespace,
                                nproc=limits.max_processes + 4 if conf.nproc_rlimit_applies(avail) else None,
                                extra_ro=sandbox_limits.ro_paths)
        spec["net_ns"] = avail.network_namespace
        token = secrets.token_hex(12)
        env = {**sandbox_env(home_seen), conf.TOKEN_VAR: token, "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        argv = [sys.executable, "-I", "-m", "trace_envs.synthesis.llm.probe", str(home_seen / "probe.json")]
        r, w = os.pipe()
        try:
            spec["status_fd"] = w
            res = execute(conf.launcher_argv(spec, argv), dirs["work"], env, sandbox_limits, limits.timeout_s, token,
                          scan=not avail.pid_namespace, merge_stderr=False, pass_fds=(w,))
            os.close(w)
            w = -1
            conf.read_all(r)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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
    return ProbeRun(doc, last, res.timed_out, res.killed, res.returncode, res.stderr[-3000:], report.as_dict())
