"""A pipeline run's elapsed time from the stage records of its ``pipeline.json``: the one count that the report's
Pipeline section and ``benchmarks/miniature_replication.py`` (its run-time goal) both print."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trace_train.report.loaders import num


def _spans(record: Mapping[str, Any]) -> list[tuple[float, float]]:
    """A record's well-formed ``[start, end]`` spans (two finite numbers, end not before start)."""
    spans = record.get("spans")
    out = []
    for span in spans if isinstance(spans, list) else []:
        if isinstance(span, (list, tuple)) and len(span) == 2:
            start, stop = num(span[0]), num(span[1])
            if start is not None and stop is not None and stop >= start:
                out.append((start, stop))
    return out


def elapsed_seconds(stages: Mapping[str, Any]) -> float:
    """The union of the stages' recorded ``spans`` (their [start, end] Unix times): stages that ran at once in
    ``pipeline.workers`` processes count once, a resumed stage each of its parts once, one redone for new inputs
    only its redo. A record without spans (written before they existed) adds its ``wall_s``; what is not a record
    or a number is left out."""
    spans: list[tuple[float, float]] = []
    unspanned = 0.0
    for record in stages.values():
        if not isinstance(record, Mapping):
            continue
        own = _spans(record)
        spans.extend(own)
        if not own:
            unspanned += max(0.0, num(record.get("wall_s")) or 0.0)
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        total += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return total + unspanned
