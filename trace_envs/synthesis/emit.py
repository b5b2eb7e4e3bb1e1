"""Emission of calibrated family envs as manifest rows, and the ``trace-rl synthesize`` flow.

For each selected capability with a family: search the difficulty knobs until the calibration gate
passes, then add the row ``{env_id, family, capability, domain, knobs, calibration, ...}`` to
``<dir>/manifest.json`` (atomically); ``generated_envs.load(<dir>)`` turns rows into Gymnasium registrations of
``trace/<capability>-<domain>-v0`` with the calibrated knobs. A template env is data, not a generated module; only
LLM-written env modules (validated first) are code. A capability without a family is reported (it needs the
LLM-driven env generator) and the others proceed; a capability whose gate cannot be met is reported with the
closest statistics and is not emitted (unless ``accept_closest``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trace_envs.atomic_io import write_text_atomic
from trace_envs.families import FAMILIES
from trace_envs.registry import NAMESPACE, unregister_env
from trace_envs.synthesis.calibrate import Collector, PolicyFactory, SearchResult, Trial, search_knobs
from trace_envs.synthesis.config import SynthesisConfig

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"


@dataclass
class SelectedCapability:
    """One entry of ``selected_capabilities.json`` (extra keys are kept in ``extra``)."""

    name: str
    description: str = ""
    mean_cov: float | None = None
    mean_delta: float | None = None
    n_runs_passed: int | None = None
    example_failed_ids: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SelectedCapability":
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise ValueError(f"a selected capability needs a string 'name', got {data!r}")
        known = {"name", "description", "mean_cov", "mean_delta", "n_runs_passed", "example_failed_ids",
                 "example_failed_cases"}
        examples = data.get("example_failed_ids", data.get("example_failed_cases")) or []
        return cls(name=data["name"], description=str(data.get("description", "")), mean_cov=data.get("mean_cov"),
                   mean_delta=data.get("mean_delta"), n_runs_passed=data.get("n_runs_passed"),
                   example_failed_ids=[str(e) for e in examples],
                   extra={k: v for k, v in data.items() if k not in known})


def read_selected(path: str | os.PathLike) -> list[SelectedCapability]:
    """Read ``selected_capabilities.json``: ``{"selected": [...]}`` (analysis output) or a bare list; a damaged or
    ill-shaped file is a ``ValueError`` naming it."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(doc, dict) and "selected" not in doc:
        raise ValueError(f"{path}: expected {{\"selected\": [...]}} (analysis output) or a list, got keys "
                         f"{sorted(doc)}")
    entries = doc["selected"] if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list of selected capabilities")
    try:
        return [SelectedCapability.from_dict(e) for e in entries]
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def env_name(capability: str, domain: str) -> str:
    return f"{capability}-{domain}"


def env_id(capability: str, domain: str) -> str:
    return f"{NAMESPACE}/{env_name(capability, domain)}-v0"


def module_filename(capability: str, domain: str) -> str:
    return f"{capability}_{domain.replace('-', '_')}.py"


def atomic_write_text(path: Path, text: str) -> None:
    write_text_atomic(path, text)


_TEMPLATE = '''"""Emitted by `trace-rl synthesize`: {capability} on {domain}.

{description}
Family: {entry_point} with calibrated difficulty knobs {knobs}.
Calibration ({n_seeds} seeds x {group_size}): mean reward {mean_reward:.3f}, success {success_rate:.3f},
reward std {reward_std:.3f}. Source: {source}. Delete this file to unregister the env.
"""

from trace_envs.registry import register_env

KWARGS = {kwargs}
ENV_ID = register_env({name!r}, {entry_point!r}, **KWARGS)
'''


def render_module(capability: str, domain: str, knobs: dict[str, Any], trial: Trial, description: str,
                  source: str) -> str:
    """A standalone Python module registering the env (for export; ``emit`` writes a manifest row instead)."""
    stats = trial.stats
    return _TEMPLATE.format(
        capability=capability, domain=domain, description=description or "(no description)",
        entry_point=FAMILIES[capability], knobs=json.dumps(knobs, sort_keys=True), n_seeds=stats.n_seeds,
        group_size=stats.group_size, mean_reward=stats.mean_reward, success_rate=stats.success_rate,
        reward_std=stats.reward_std, source=source or "-", kwargs=repr({"domain": domain, **knobs}),
        name=env_name(capability, domain))


def read_manifest_strict(path: Path) -> dict[str, Any]:
    """``{"envs": [row, ...]}`` of the manifest at ``path`` (empty when missing); a damaged or ill-shaped one is a
    ``ValueError`` naming it (the emitter must not overwrite rows it could not read)."""
    if not path.exists():
        return {"envs": []}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("envs", []), list) \
            or not all(isinstance(e, dict) for e in doc.get("envs", [])):
        raise ValueError(f"{path}: expected {{\"envs\": [row objects]}}; fix or remove it")
    doc.setdefault("envs", [])
    return doc


@contextlib.contextmanager
def _manifest_lock(directory: Path) -> Iterator[None]:
    with open(directory / (MANIFEST + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _settings(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a manifest row was calibrated with: its knobs and calibration (seeds, group size, statistics)."""
    return json.dumps(row.get("knobs"), sort_keys=True, default=str), \
        json.dumps(row.get("calibration"), sort_keys=True, default=str)


def _describe(row: dict[str, Any]) -> str:
    cal = row.get("calibration") if isinstance(row.get("calibration"), dict) else {}
    success = cal.get("success_rate")
    success_text = f"{success:.3f}" if isinstance(success, (int, float)) else "?"
    return (f"knobs {json.dumps(row.get('knobs'), sort_keys=True, default=str)} (success {success_text} over "
            f"{cal.get('n_seeds', '?')} seeds x {cal.get('group_size', '?')})")


def write_manifest_entry(out_dir: str | os.PathLike, entry: dict[str, Any]) -> dict[str, Any]:
    """Add (or replace, by ``env_id``) one row of ``<out_dir>/manifest.json`` atomically, then (re-)register it in
    this process so new knobs take effect without a restart; returns the row. Replacing a row calibrated with
    other knobs or statistics logs a warning naming both."""
    out = Path(out_dir)
    if not entry.get("env_id"):
        raise ValueError(f"a manifest row needs an env_id, got {entry!r}")
    manifest_path = out / MANIFEST
    out.mkdir(parents=True, exist_ok=True)
    with _manifest_lock(out):  # read-modify-write: two runs emitting into one directory keep both their rows
        doc = read_manifest_strict(manifest_path)
        for old in doc["envs"]:
            if old.get("env_id") == entry["env_id"] and _settings(old) != _settings(entry):
                logger.warning("%s: replacing the row of %s calibrated with %s by one calibrated with %s",
                               manifest_path, entry["env_id"], _describe(old), _describe(entry))
        doc["envs"] = [e for e in doc["envs"] if e.get("env_id") != entry["env_id"]] + [entry]
        atomic_write_text(manifest_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    import generated_envs

    unregister_env(entry["env_id"])
    if entry.get("module"):
        sys.modules.pop(f"generated_envs.{Path(str(entry['module'])).stem}", None)
    if generated_envs.register_row(entry, out) is None:
        raise ValueError(f"manifest row for {entry['env_id']} in {manifest_path} could not be registered (see log)")
    return entry


def emit(capability: str, result: SearchResult, out_dir: str | os.PathLike, description: str = "",
         source: str = "", trial: Trial | None = None) -> dict[str, Any]:
    """Write the capability's manifest row (atomically) and register it; returns the row.

    ``trial`` overrides the passing trial (``accept_closest``: the gate never passed)."""
    chosen = trial or result.chosen
    if chosen is None:
        raise ValueError(f"{capability}: calibration did not pass; refusing to emit")
    entry = {
        "env_id": env_id(capability, result.domain), "family": capability, "capability": capability,
        "domain": result.domain, "entry_point": FAMILIES[capability], "knobs": dict(chosen.knobs),
        "description": description, "calibration": chosen.stats.to_dict(), "passed_gate": chosen.passed,
        "needs_hints": chosen.needs_hints, "search_trials": len(result.trials), "source_run": source,
    }
    return write_manifest_entry(out_dir, entry)


@dataclass
class SynthesisReport:
    emitted: list[dict[str, Any]] = field(default_factory=list)
    no_family: list[str] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)  # gate never passed: closest trial
    searches: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"emitted": self.emitted, "no_family": self.no_family, "failed": self.failed, "searches": self.searches}


def synthesize(selected: list[SelectedCapability], cfg: SynthesisConfig, out_dir: str | os.PathLike,
               source: str = "", policy_factory: PolicyFactory | None = None,
               on_trial: Callable[[str, Trial], None] | None = None,
               collector: Collector | None = None) -> SynthesisReport:
    """Calibrate and emit one env per selected capability that has a family (see module docstring).

    Rollouts come from ``collector`` (e.g. the base model), else ``policy_factory``, else the scripted
    expert of ``cfg.policy``. With ``cfg.accept_closest`` a capability whose gate never passes is still
    emitted at its closest setting (and listed in ``failed`` with ``emitted: true``)."""
    report = SynthesisReport()
    for cap in selected:
        if cap.name not in FAMILIES:
            logger.warning("capability %r has no env family: it needs the LLM-driven env generator "
                           "(prompts/env synthesis); skipped", cap.name)
            report.no_family.append(cap.name)
            continue
        result = search_knobs(cap.name, cfg, policy_factory,
                              on_trial=(lambda t, name=cap.name: on_trial(name, t)) if on_trial else None,
                              collector=collector)
        report.searches.append(result.to_dict())
        trial = None
        if not result.passed:
            trial = result.closest(cfg.gate)
            logger.warning("capability %r: no difficulty setting passes the calibration gate; closest %s: %s%s",
                           cap.name, trial.knobs, trial.failures, " (emitted anyway: accept_closest)"
                           if cfg.accept_closest else "")
            report.failed.append({"capability": cap.name, "closest": trial.to_dict(), "emitted": cfg.accept_closest})
            if not cfg.accept_closest:
                continue
        report.emitted.append(emit(cap.name, result, out_dir, cap.description, source, trial=trial))
    return report
