"""Programmatic labeling: capability probes (plain functions) and a labeler that runs them N times.

A probe is ``(TrajectoryRecord) -> Label``. Probes are registered per domain (``retail_sim``,
later ``tau2_airline`` …); the ``generic`` domain holds distractors that read only the messages and
are offered for every domain. The :class:`ProgrammaticLabeler` is the offline stand-in for the
paper's N independent LLM labeling runs: it computes each probe once and then perturbs the labels
of every run with seeded noise, so the runs disagree the way independent labelers do.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from trace_envs.records import TrajectoryRecord
from trace_train.analysis.labels import Capability, Label, LabelRun, Probe
from trace_train.analysis.messages import assistant_texts, is_error_result, is_write_tool, tool_calls

logger = logging.getLogger(__name__)

GENERIC = "generic"
_REGISTRY: dict[str, dict[str, Capability]] = {}
_DOMAIN_MATCHERS: dict[str, Callable[[str], bool]] = {}
# domains whose probes live in a module that registers them on import
_DOMAIN_MODULES: dict[str, str] = {"retail_sim": "trace_train.analysis.retail_probes"}


def register_probe(domain: str, name: str, description: str) -> Callable[[Probe], Probe]:
    """Decorator: register ``probe`` as capability ``name`` of ``domain``."""

    def deco(probe: Probe) -> Probe:
        _REGISTRY.setdefault(domain, {})[name] = Capability(name, description, probe)
        return probe

    return deco


def register_probe_domain(domain: str, matches_env_id: Callable[[str], bool], module: str | None = None) -> None:
    """Declare which env ids belong to ``domain`` (for ``domain=auto``) and where its probes live."""
    _DOMAIN_MATCHERS[domain] = matches_env_id
    if module:
        _DOMAIN_MODULES[domain] = module


def env_id_matcher(env_ids: Iterable[str]) -> Callable[[str], bool]:
    """A ``matches_env_id`` for ``register_probe_domain``: true for these ids, bare or as ``module:id``."""
    wanted = {str(e).split(":", 1)[-1] for e in env_ids}
    return lambda env_id: str(env_id).split(":", 1)[-1] in wanted


def register_env_probes(domain: str, env_ids: Iterable[str],
                        probes: dict[str, tuple[str, Probe]]) -> list[Capability]:
    """Bring-your-own-env probe API: trajectories of ``env_ids`` belong to ``domain`` (``domain=auto``
    finds it), whose capabilities are ``probes`` = ``{name: (description, probe)}``. A probe reads one
    ``TrajectoryRecord`` and returns ``Label.NA`` (the task does not need it), ``PRESENT`` or ``LACKING``.
    Call it at import time of a module you pass to ``trace-rl analyze imports=[mymod]``."""
    if not probes:
        raise ValueError(f"register_env_probes({domain!r}): give at least one probe")
    register_probe_domain(domain, env_id_matcher(env_ids))
    for name, (description, probe) in probes.items():
        if not callable(probe):
            raise ValueError(f"probe {name!r} of domain {domain!r} is not callable")
        register_probe(domain, name, description)(probe)
    return [_REGISTRY[domain][name] for name in probes]


def _load(domain: str) -> None:
    if domain in _DOMAIN_MODULES and domain not in _REGISTRY:
        importlib.import_module(_DOMAIN_MODULES[domain])


def capabilities_for(domain: str, include_generic: bool = True, names: Iterable[str] | None = None) -> list[Capability]:
    """The probe-backed capabilities of ``domain`` (plus the generic distractors), optionally filtered."""
    _load(domain)
    if domain != GENERIC and domain not in _REGISTRY:
        raise KeyError(f"no probes registered for domain {domain!r}; known: {sorted(_REGISTRY)}")
    caps = dict(_REGISTRY.get(domain, {}))
    if include_generic:
        for name, cap in _REGISTRY[GENERIC].items():
            caps.setdefault(name, cap)
    if names is not None:
        wanted = list(names)
        repeated = sorted(n for n, count in Counter(wanted).items() if count > 1)
        if repeated:
            raise ValueError(f"capabilities {repeated} are named more than once in {wanted}; name each once")
        unknown = [n for n in wanted if n not in caps]
        if unknown:
            raise KeyError(f"unknown capabilities for domain {domain!r}: {unknown}; known: {sorted(caps)}")
        return [caps[n] for n in wanted]
    return list(caps.values())


def _load_all() -> None:
    for module in set(_DOMAIN_MODULES.values()):
        try:
            importlib.import_module(module)
        except ImportError as exc:  # a domain whose env package is not installed
            logger.debug("probe module %s not importable: %s", module, exc)


def known_domains() -> list[str]:
    """Every domain with probes (their modules loaded) or a registered probe module."""
    _load_all()
    return sorted({*_REGISTRY, *_DOMAIN_MODULES})


def detect_domain(records: Sequence[TrajectoryRecord]) -> str:
    """The single registered domain every record's env id belongs to (``generic`` when none)."""
    _load_all()
    found = {d for r in records for d, match in _DOMAIN_MATCHERS.items() if match(r.env_id)}
    if len(found) > 1:
        raise ValueError(f"trajectories span several domains {sorted(found)}; analyze them separately")
    return found.pop() if found else GENERIC


@dataclass
class ProgrammaticLabeler:
    """Runs every capability's probe on every record, then applies per-run seeded label noise.

    With probability ``noise_rate`` a label is replaced by one of the two other labels (uniformly),
    independently per (run, trajectory, capability), drawn from ``np.random.default_rng((seed, run))``.
    """

    capabilities: Sequence[Capability]
    noise_rate: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise_rate <= 1.0:
            raise ValueError(f"noise_rate must be in [0, 1], got {self.noise_rate}")
        missing = [c.name for c in self.capabilities if c.probe is None]
        if missing:
            raise ValueError(f"capabilities without a probe: {missing}")

    def clean_labels(self, records: Sequence[TrajectoryRecord]) -> LabelRun:
        """The noise-free probe labels (run index -1); a probe that raises leaves its pair missing."""
        run = LabelRun(run=-1)
        failures = 0
        for record in records:
            for cap in self.capabilities:
                key = (record.episode_id, cap.name)
                try:
                    run[key] = cap.probe(record)  # type: ignore[misc]
                except Exception:
                    failures += 1
                    logger.exception("probe %s failed on %s", cap.name, record.episode_id)
                    run.mark_missing([key])
        if failures:
            logger.warning("%d probe calls raised; those pairs are recorded as missing", failures)
        return run

    def label(self, records: Sequence[TrajectoryRecord], n_runs: int) -> list[LabelRun]:
        clean = self.clean_labels(records)
        order = list(Label)
        runs = []
        for r in range(n_runs):
            rng = np.random.default_rng((self.seed, r))
            run = LabelRun(run=r, missing=set(clean.missing))
            for record in records:
                for cap in self.capabilities:
                    key = (record.episode_id, cap.name)
                    flip, pick = rng.random(), int(rng.integers(2))
                    label = clean.get(key)
                    if label is None:
                        continue
                    if flip < self.noise_rate:
                        label = [lab for lab in order if lab is not label][pick]
                    run[key] = label
            runs.append(run)
        return runs


# ---------------------------------------------------------------- generic distractor probes
# Plausible-sounding capabilities that read only the surface of the conversation. On a target whose
# failures come from reasoning and tool use they should not separate failures from successes.

_POLITE = re.compile(r"\b(please|thanks?|thank you|sorry|apologi[sz]e)\b", re.IGNORECASE)
_CONFIRM = re.compile(
    r"\b(confirm|proceed|shall i|should i|do you want|would you like|is that (correct|right|ok)|yes)\b",
    re.IGNORECASE,
)


@register_probe(GENERIC, "politeness", "The agent closes the conversation courteously: its final message "
                "to the user thanks them, apologizes or says please. NA when the agent never writes to the user.")
def probe_politeness(record: TrajectoryRecord) -> Label:
    texts = [t for _, t in assistant_texts(record.messages)]
    if not texts:
        return Label.NA
    return Label.PRESENT if _POLITE.search(texts[-1]) else Label.LACKING


@register_probe(GENERIC, "asks_for_confirmation", "Before its first state-changing tool call the agent "
                "asks the user an explicit confirmation question. NA when the agent makes no write call.")
def probe_asks_for_confirmation(record: TrajectoryRecord) -> Label:
    writes = [c for c in tool_calls(record.messages) if is_write_tool(c.name)]
    if not writes:
        return Label.NA
    first = writes[0].index
    asked = any("?" in t and _CONFIRM.search(t) for i, t in assistant_texts(record.messages) if i <= first)
    return Label.PRESENT if asked else Label.LACKING


@register_probe(GENERIC, "transfer_when_stuck", "After two consecutive failing tool calls the agent "
                "hands the conversation to a human agent instead of looping. NA when it never gets stuck.")
def probe_transfer_when_stuck(record: TrajectoryRecord) -> Label:
    calls = tool_calls(record.messages)
    stuck_at = None
    for prev, cur in itertools.pairwise(calls):
        if is_error_result(prev.result) and is_error_result(cur.result):
            stuck_at = cur.index
            break
    if stuck_at is None:
        return Label.NA
    transferred = any("transfer" in c.name.lower() for c in calls if c.index > stuck_at)
    return Label.PRESENT if transferred else Label.LACKING
