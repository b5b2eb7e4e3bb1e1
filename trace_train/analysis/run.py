"""The analysis step end to end: trajectories in, labeling runs, aggregation, files out."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trace_envs.records import TrajectoryRecord, write_json_atomic
from trace_train.analysis.aggregate import AnalysisResult, Thresholds, aggregate, write_selected
from trace_train.analysis.config import AnalysisConfig, LLMLabelerConfig, ProgrammaticLabelerConfig
from trace_train.analysis.labels import Capability, LabelRun
from trace_train.analysis.llm_client import ChatClient
from trace_train.analysis.llm_labeler import LLMLabeler, load_capabilities
from trace_train.analysis.probes import ProgrammaticLabeler, capabilities_for, detect_domain

logger = logging.getLogger(__name__)


@dataclass
class AnalysisOutput:
    result: AnalysisResult
    capabilities: list[Capability]
    runs: list[LabelRun]
    out_dir: Path


def success_map(records: Sequence[TrajectoryRecord]) -> dict[str, bool]:
    success: dict[str, bool] = {}
    for r in records:
        if r.episode_id in success:
            raise ValueError(f"duplicate episode_id {r.episode_id!r}: give every trajectory a unique id")
        success[r.episode_id] = bool(r.success)
    return success


def thresholds_from(cfg: AnalysisConfig) -> Thresholds:
    return Thresholds(rho=cfg.rho, delta=cfg.delta, k=cfg.k, epsilon=cfg.epsilon)


def auto_domain(records: Sequence[TrajectoryRecord]) -> str:
    """``domain=auto``: τ² records (a ``trace/tau2-*`` env id, or a family episode on a τ² domain) get the τ²
    labeler (``trace_train.analysis.tau2_labeler``); every other record goes by its env id."""
    from trace_train.analysis import tau2_labeler

    flags = {tau2_labeler.is_tau2_record(r) for r in records}
    if flags == {True}:
        return tau2_labeler.DOMAIN
    if True in flags:
        raise ValueError("trajectories mix τ² and other envs; analyze them separately")
    return detect_domain(records)


def known_domains() -> list[str]:
    """The ``analysis.programmatic.domain`` values: ``auto``, ``tau2`` and every domain with probes."""
    from trace_train.analysis import probes

    return sorted({"auto", "tau2", *probes.known_domains()})


def programmatic_capabilities(records: Sequence[TrajectoryRecord], cfg: ProgrammaticLabelerConfig
                              ) -> tuple[str, list[Capability]]:
    """The domain and the capabilities the programmatic labeler probes; ``ValueError`` naming the key to fix."""
    domain = cfg.domain if cfg.domain != "auto" else auto_domain(records)
    if domain == "tau2":
        from trace_train.analysis import tau2_labeler  # noqa: F401  (registers the τ² probes)
    names = list(cfg.capabilities) if cfg.capabilities else None
    try:
        caps = capabilities_for(domain, include_generic=bool(cfg.include_generic), names=names)
    except KeyError as exc:
        message = exc.args[0] if exc.args else str(exc)
        if names is not None and domain in known_domains():
            raise ValueError(f"analysis.programmatic.capabilities={names}: {message}") from None
        raise ValueError(f"analysis.programmatic.domain={cfg.domain}: no probes registered for domain {domain!r}; "
                         f"choose one of {', '.join(known_domains())}") from None
    return domain, caps


def check_llm(cfg: LLMLabelerConfig) -> list[Capability] | None:
    """The LLM labeler's settings that fail without a request (``ValueError`` naming the key); the candidate
    dictionary of ``capabilities_file`` when given."""
    if isinstance(cfg.timeout, bool) or not isinstance(cfg.timeout, (int, float)) or cfg.timeout <= 0:
        raise ValueError(f"analysis.llm.timeout must be a number of seconds > 0, got {cfg.timeout!r}; "
                         "set analysis.llm.timeout=<seconds>")
    if cfg.capabilities_file:
        if not Path(cfg.capabilities_file).is_file():
            raise ValueError(f"analysis.llm.capabilities_file={cfg.capabilities_file}: no such file; set "
                             "analysis.llm.capabilities_file=<candidate dictionary JSON> or null to discover them")
        return load_capabilities(cfg.capabilities_file)
    return None


def check_analysis(records: Sequence[TrajectoryRecord], cfg: AnalysisConfig | Any, labeler: str) -> None:
    """Everything about the labeler that can be checked before any file is written (``ValueError`` otherwise)."""
    cfg = AnalysisConfig.coerce(cfg)
    if labeler == "programmatic":
        programmatic_capabilities(records, cfg.programmatic)
    elif labeler == "llm":
        check_llm(cfg.llm)
    else:
        raise ValueError(f"labeler must be 'programmatic' or 'llm', got {labeler!r}")


def programmatic_runs(records: Sequence[TrajectoryRecord], cfg: ProgrammaticLabelerConfig, n_runs: int):
    domain, caps = programmatic_capabilities(records, cfg)
    logger.info("programmatic labeler: domain %s, %d capabilities", domain, len(caps))
    labeler = ProgrammaticLabeler(caps, noise_rate=float(cfg.noise_rate), seed=int(cfg.seed))
    return caps, labeler.label(records, n_runs)


def llm_runs(records: Sequence[TrajectoryRecord], cfg: LLMLabelerConfig, n_runs: int, out_dir: Path):
    given = check_llm(cfg)
    cache = cfg.cache_dir or str(Path.home() / ".cache" / "trace-rl" / "llm_analysis")
    client = ChatClient(
        base_url=cfg.base_url, model=cfg.model, api_key=cfg.api_key, temperature=float(cfg.temperature),
        max_tokens=int(cfg.max_tokens), timeout=float(cfg.timeout), retries=int(cfg.retries), cache_dir=cache,
    )
    labeler = LLMLabeler(client, batch_size=int(cfg.batch_size), label_retries=int(cfg.label_retries),
                         seed=int(cfg.seed), max_tool_chars=int(cfg.max_tool_chars),
                         discovery_max_chars=int(cfg.discovery_max_chars),
                         min_labeled_fraction=float(cfg.min_labeled_fraction))
    if given is not None:
        caps = given
    else:
        caps = labeler.discover(records, max_candidates=int(cfg.max_candidates))
        write_json_atomic(out_dir / "candidate_capabilities.json", {"candidates": [c.to_dict() for c in caps]})
    runs = labeler.label(records, caps, n_runs)
    logger.info("llm labeler: %d requests, %d cache hits", client.requests_made, client.cache_hits)
    return caps, runs


def run_analysis(records: Sequence[TrajectoryRecord], cfg: AnalysisConfig | Any, labeler: str, out_dir: str | Path,
                 run_meta: dict[str, Any] | None = None) -> AnalysisOutput:
    """Label ``records`` with the configured labeler, aggregate, write the outputs into ``out_dir``.

    ``cfg`` is the ``analysis`` config group (conf/analysis/default.yaml): an :class:`AnalysisConfig`, or a
    mapping / DictConfig built into one (strictly: an unknown or mistyped key fails with its path).
    """
    cfg = AnalysisConfig.coerce(cfg)
    out = Path(out_dir)
    if not records:
        raise ValueError("no trajectories to analyze")
    success = success_map(records)
    check_analysis(records, cfg, labeler)  # before the out dir is made: a bad setting leaves no folder
    out.mkdir(parents=True, exist_ok=True)
    n_runs = int(cfg.n_runs)
    if labeler == "programmatic":
        caps, runs = programmatic_runs(records, cfg.programmatic, n_runs)
    elif labeler == "llm":
        caps, runs = llm_runs(records, cfg.llm, n_runs, out)
    else:
        raise ValueError(f"labeler must be 'programmatic' or 'llm', got {labeler!r}")
    result = aggregate(runs, caps, success, thresholds_from(cfg))
    for run in runs:
        write_json_atomic(out / "labels" / f"run_{run.run + 1:02d}.json",
                          run.to_partition(success, [c.name for c in caps]))
    doc = result.to_json()
    doc["run"] = {"labeler": labeler, **(run_meta or {}), "analysis": asdict(cfg)}
    write_json_atomic(out / "selected_capabilities.json", doc)
    return AnalysisOutput(result=result, capabilities=list(caps), runs=runs, out_dir=out)


def result_files(out: Path) -> list[Path]:
    """What :func:`run_analysis` wrote into ``out`` (its selection, the candidate dictionary, the label runs)."""
    out = Path(out)
    return [out / "selected_capabilities.json", out / "candidate_capabilities.json",
            *sorted((out / "labels").glob("run_*.json"))]


__all__ = ["AnalysisOutput", "check_analysis", "result_files", "run_analysis", "write_selected"]
