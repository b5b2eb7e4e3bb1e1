"""``build_report(run_dir)``: one static, self-contained ``report.html`` for a TRACE run directory."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from trace_envs.atomic_io import write_text_atomic
from trace_train.report.assets import CSS, ERROR_HOOK_JS, VIEWER_JS
from trace_train.report.html_util import not_run, section
from trace_train.report.loaders import Loaded, RunData, load_run
from trace_train.report.sections_analysis import calibration_section, capabilities_section, pipeline_section
from trace_train.report.sections_combinations import combinations_section
from trace_train.report.sections_replication import headline_banner, own_seed_note, replication_section
from trace_train.report.sections_results import (
    efficiency_section,
    evaluation_section,
    routing_section,
    training_section,
)
from trace_train.report.sections_routing import with_routing_trace
from trace_train.report.svg import esc
from trace_train.report.viewer import ViewerLimits, embed_json, viewer_data

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = ViewerLimits()
GENERATOR = "trace-rl report"  # the page's generator meta: an existing file holding it may be replaced
SURROGATES = re.compile("[\ud800-\udfff]")

SECTIONS = (
    ("pipeline", "Pipeline"), ("analysis", "Capabilities"), ("synthesis", "Environments"),
    ("training", "Training"), ("evaluation", "Evaluation"), ("combinations", "Combinations"),
    ("replication", "Replication"),
    ("efficiency", "Sample efficiency"), ("routing", "Routing"), ("viewer", "Trajectories"),
)


def _bytes(n: int) -> str:
    """A byte limit, exactly (``1.5 MB`` only when that is exact)."""
    return f"{n / 1e6:g} MB" if n % 100_000 == 0 else f"{n:,} bytes"


def viewer_section(run: RunData, limits: ViewerLimits) -> str:
    if not run.trajectories:
        return section("viewer", "Trajectory viewer",
                       not_run(Loaded("rollouts/trajectories.jsonl or eval/trajectories_<policy>.jsonl"),
                               run.pipeline, "rollouts"))
    data = viewer_data(run, limits)
    errors = "".join(f'<p class="note warn">{esc(s["file"])}: {esc(s["error"])}</p>'
                     for s in data["sources"] if s.get("error"))
    body = (
        f"{errors}<div id=\"viewer\"><div class=\"controls\">"
        '<label>policy <select id="f-source"></select></label>'
        '<label>outcome <select id="f-success"><option value="">all</option><option value="success">success'
        '</option><option value="failure">failure</option></select></label>'
        '<label>capability <select id="f-cap"></select></label><span id="f-count" class="muted"></span></div>'
        '<div class="panes"><ul id="traj-list"></ul><div id="traj-detail">'
        '<noscript><p class="note">The viewer needs JavaScript.</p></noscript></div></div></div>'
        f'<script type="application/json" id="traj-data">{embed_json(data)}</script>'
    )
    left = data["left_out"]
    if left["trajectories"] or left["files"]:
        files = f" and {left['files']} of the {len(run.trajectories)} files" if left["files"] else ""
        body = (f'<p class="note warn">To keep the embedded data within {_bytes(limits.max_bytes)}, '
                f"{left['trajectories']} of the {left['sampled']} sampled trajectories{files} were left out "
                "(<code>viewer.max_bytes=...</code> embeds more).</p>" + body)
    shown = ", ".join(f"{s['name']}: {len(s['items'])} of {s['total']}" for s in data["sources"])
    return section("viewer", "Trajectory viewer", body,
                   f"A sample: {shown} (at most {limits.max_per_policy} per policy and {limits.max_total} in all, "
                   f"half failures where possible, the embedded data at most {_bytes(limits.max_bytes)}; "
                   "`trace-rl report viewer.max_total=... viewer.max_per_policy=...` embeds more), "
                   f"{limits.max_messages} messages each, long texts clipped. Capability filter: the task's "
                   "required capabilities and, for target rollouts, the analysis labels.")


# what a section's files can hold that its code did not expect (valid JSON of another shape: hand-edited, from
# another version); the section says so and the rest of the page is built
SHAPE_ERRORS = (TypeError, KeyError, AttributeError, IndexError, ValueError, OverflowError)


def _guarded(sid: str, build: Callable[[], str]) -> str:
    try:
        return build()
    except SHAPE_ERRORS as exc:
        logger.warning("report section %s: its files are not in the expected shape (%s: %s)", sid,
                       type(exc).__name__, exc, exc_info=True)
        note = (f'<p class="note warn">This section could not be built: its files are not in the shape this version '
                f"writes ({esc(type(exc).__name__)}: {esc(exc)}). Was a file edited by hand, or written by another "
                "version?</p>")
        return section(sid, dict(SECTIONS)[sid], note)


def render_report(run: RunData, limits: ViewerLimits = DEFAULT_LIMITS, title: str | None = None) -> str:
    """The whole page as one string; a section whose files are not in the expected shape says so instead."""
    target = run.pipeline.data.get("target_env") if isinstance(run.pipeline.data, dict) else None
    title = title or f"TRACE run · {run.run_dir.name}"
    builders: dict[str, Callable[[], str]] = {
        "pipeline": lambda: pipeline_section(run), "analysis": lambda: capabilities_section(run),
        "synthesis": lambda: calibration_section(run), "training": lambda: training_section(run),
        "evaluation": lambda: evaluation_section(run), "combinations": lambda: combinations_section(run),
        "replication": lambda: replication_section(run),
        "efficiency": lambda: efficiency_section(run),
        "routing": lambda: with_routing_trace(routing_section(run), run),
        "viewer": lambda: viewer_section(run, limits),
    }
    parts = {sid: _guarded(sid, build) for sid, build in builders.items()}
    try:
        banner = headline_banner(run, own_seed_note(run))
    except SHAPE_ERRORS as exc:
        logger.warning("report headline: eval.json is not in the expected shape (%s: %s)", type(exc).__name__, exc)
        banner = (f'<p class="note warn">No verdict: eval.json is not in the shape this version writes '
                  f"({esc(type(exc).__name__)}: {esc(exc)}).</p>")
    nav = "".join(
        f'<a href="#{sid}" class="{"missing" if "notrun" in parts[sid] else ""}">{esc(label)}</a>'
        for sid, label in SECTIONS if parts[sid])
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sub = f"target <code>{esc(target)}</code> · " if target else ""
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta name="generator" content="{GENERATOR}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style><script>{ERROR_HOOK_JS}</script></head><body>"
        f"<header><h1>{esc(title)}</h1><p>{sub}run directory <code>{esc(run.run_dir)}</code> · "
        f"generated {stamp} by trace-rl</p>{banner}</header><nav>{nav}</nav><main>"
        + "".join(parts[sid] for sid, _ in SECTIONS)
        + f"</main><footer>{GENERATOR} · self-contained, no network access needed</footer>"
        f"<script>{VIEWER_JS}</script></body></html>\n"
    )
    # a lone surrogate (half an emoji, escaped in a JSON file) cannot be written as UTF-8
    return SURROGATES.sub("\ufffd", page)


def check_out(path: Path) -> None:
    """Refuse to write the report over a directory or over a file that is not a trace-rl report."""
    if path.is_dir():
        raise ValueError(f"out={path} is a directory; give the report's file path (e.g. {path / 'report.html'})")
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as fh:
            head = fh.read(2048)
            # older reports have no generator meta, only the footer (a report is a few MB at most)
            ours = head.startswith(b"<!DOCTYPE html>") and (f'content="{GENERATOR}"'.encode() in head
                                                            or f"<footer>{GENERATOR} ".encode() in head + fh.read())
        if not ours:
            raise ValueError(f"out={path} exists and is not a trace-rl report; it is left as it is (remove it or "
                             "choose another out=...)")


def build_report(run_dir: str | os.PathLike, out: str | os.PathLike | None = None,
                 limits: ViewerLimits = DEFAULT_LIMITS) -> Path:
    """Read ``run_dir`` and write ``<run_dir>/report.html`` (or ``out``) atomically; returns its path.

    An existing ``out`` is replaced only when it is a trace-rl report (:func:`check_out`: ValueError otherwise)."""
    path = Path(out) if out is not None else Path(run_dir) / "report.html"
    check_out(path)
    run = load_run(run_dir)
    html = render_report(run, limits)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, html)
    logger.info("report: %s (%.1f KB)", path, path.stat().st_size / 1024)
    return path
