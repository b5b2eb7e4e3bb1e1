"""Small HTML builders that escape by default: plain values are escaped, only :class:`Raw` passes through."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trace_train.report.loaders import Loaded, num
from trace_train.report.svg import esc

# Section id -> the pipeline stage names that produce it (the orchestrator's names, plus aliases).
STAGE_ALIASES: dict[str, tuple[str, ...]] = {
    "rollouts": ("rollout", "rollouts"),
    "analysis": ("analyze", "analysis"),
    "synthesis": ("synthesize", "synthesis", "calibrate"),
    "training": ("train", "training", "grpo"),
    "routing": ("compose", "composition"),
    "evaluation": ("eval", "evaluate", "evaluation"),
    "efficiency": ("eval", "sample_efficiency", "evaluate", "evaluation"),
}


@dataclass(frozen=True)
class Raw:
    """HTML that is already safe (built by this package)."""

    html: str

    def __str__(self) -> str:
        return self.html


def cell(value: Any) -> str:
    if isinstance(value, Raw):
        return value.html
    if value is None:
        return '<span class="muted">–</span>'
    return esc(value)


def fmt(value: Any, digits: int = 3, signed: bool = False) -> str:
    v = num(value)
    if v is None:
        return "–"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{cell(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<div class="tablewrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def section(sid: str, title: str, body: str, subtitle: str = "") -> str:
    sub = f'<p class="subtitle">{esc(subtitle)}</p>' if subtitle else ""
    return f'<section id="{esc(sid)}" data-section="{esc(sid)}"><h2>{esc(title)}</h2>{sub}{body}</section>'


def stage_status(pipeline: Loaded, sid: str) -> str | None:
    stages = pipeline.data.get("stages") if isinstance(pipeline.data, dict) else None
    if not isinstance(stages, dict):
        return None
    for name in STAGE_ALIASES.get(sid, (sid,)):
        entry = stages.get(name)
        if isinstance(entry, dict) and entry.get("status"):
            return f"{name}: {entry['status']}"
    return None


def not_run(loaded: Loaded | None, pipeline: Loaded, sid: str, what: str = "") -> str:
    """The note shown instead of a section whose file is missing or unreadable."""
    status = stage_status(pipeline, sid)
    status_txt = f" (pipeline stage {esc(status)})" if status else ""
    if loaded is not None and loaded.error:
        return (f'<p class="note notrun">Could not read <code>{esc(loaded.rel)}</code>{status_txt}: '
                f'{esc(loaded.error)}</p>')
    target = f"<code>{esc(loaded.rel)}</code> not found" if loaded is not None else esc(what)
    return f'<p class="note notrun">Not run: {target}{status_txt}.</p>'


def badge(text: str, kind: str) -> str:
    return f'<span class="badge {esc(kind)}">{esc(text)}</span>'
