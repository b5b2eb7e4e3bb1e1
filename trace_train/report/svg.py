"""Inline SVG charts generated in Python (no JS library, no network): line charts, bars, interval bars.

Every text that reaches the SVG goes through :func:`esc`; numbers are formatted by us.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563",
           "#65a30d", "#9333ea")


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def color(i: int) -> str:
    """The palette's colours, then generated ones whose hues lie a golden angle apart (all distinct; dark enough
    for white text)."""
    if 0 <= i < len(PALETTE):
        return PALETTE[i]
    j = abs(i) - len(PALETTE)
    return f"hsl({(j * 137.508 + 17) % 360:.1f},65%,{34 + 6 * (j % 3)}%)"


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.0f}"
    return f"{v:.2f}".rstrip("0").rstrip(".") if abs(v) >= 0.01 else f"{v:.1e}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + max(abs(lo) * 1e-9, 1.0)
    raw = (hi - lo) / max(count, 1)
    if not math.isfinite(raw) or raw <= 0:
        return []  # a range wider than floats hold, or too narrow for their precision
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step + 1e-9), math.floor(hi / step + 1e-6)
    return [round(k * step, 12) for k in range(first, min(last, first + 4 * max(count, 1) + 4) + 1)]


@dataclass
class Series:
    """One line: points (x, y) and, optionally, a band [low, high] per point."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    dashed: bool = False


def _legend_slots(names: Sequence[str], left: float, width: float) -> list[tuple[float, int]]:
    """(x, row) of each legend entry, flowing left to right and wrapping (about 7 px per character)."""
    slots, x, row = [], left, 0
    for name in names:
        w = 34 + 7 * len(name)
        if x > left and x + w > left + width:
            x, row = left, row + 1
        slots.append((x, row))
        x += w
    return slots


def line_chart(series: Sequence[Series], x_label: str, y_label: str, y_range: tuple[float, float] | None = None,
               width: int = 560, height: int = 280, title: str = "") -> str:
    """A line chart with axes, grid, legend, optional bands and a hover title on every point; points with a
    non-finite value are left out (a note says how many), values too far apart for one axis give a note."""
    series, dropped = _finite(series)
    note = (f'<p class="note warn">{dropped} point{"s" if dropped > 1 else ""} with a non-finite value left out of '
            "this chart.</p>" if dropped else "")
    pts = [(x, y) for s in series for x, y in zip(s.xs, s.ys) if y is not None]
    if not pts:
        return note + '<p class="note">no data points</p>'
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts] + [v for s in series for v in (list(s.low or []) + list(s.high or []))]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_lo, y_hi = y_range if y_range else (min(ys), max(ys))
    if not y_range:
        pad = (y_hi - y_lo) * 0.08 or max(abs(y_hi) * 0.1, 0.1)
        y_lo, y_hi = y_lo - pad, y_hi + pad
    if not all(math.isfinite(v) for v in (x_hi - x_lo, y_hi - y_lo)) or y_hi == y_lo:
        return note + (f'<p class="note warn">Not plotted: the values ({esc(y_label)} {min(ys):.4g} to '
                       f"{max(ys):.4g}, {esc(x_label)} {min(xs):.4g} to {max(xs):.4g}) are too far apart or too "
                       "large for one chart.</p>")
    left, right, top, bottom = 56, 16, 28 if title else 12, 44
    pw, ph = width - left - right, height - top - bottom
    slots = _legend_slots([s.name for s in series], left, pw)
    legend_h = 18 * (max((row for _, row in slots), default=-1) + 1)
    total_h = height + legend_h

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y: float) -> float:
        return top + ph - (min(max(y, y_lo), y_hi) - y_lo) / (y_hi - y_lo) * ph

    out = [f'<svg class="chart" viewBox="0 0 {width} {total_h}" width="{width}" height="{total_h}" '
           f'role="img" aria-label="{esc(title or y_label)}" xmlns="http://www.w3.org/2000/svg">']
    if title:
        out.append(f'<text x="{left}" y="16" class="ctitle">{esc(title)}</text>')
    for t in nice_ticks(y_lo, y_hi):
        if y_lo - 1e-12 <= t <= y_hi + 1e-12:
            y = sy(t)
            out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                       f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{_fmt(t)}</text>')
    for t in nice_ticks(x_lo, x_hi, 6):
        if x_lo - 1e-12 <= t <= x_hi + 1e-12:
            x = sx(t)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" class="grid"/>'
                       f'<text x="{x:.1f}" y="{top + ph + 16}" class="tick" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph + 34}" class="axis" '
               f'text-anchor="middle">{esc(x_label)}</text>')
    out.append(f'<text transform="translate(14 {top + ph / 2:.1f}) rotate(-90)" class="axis" '
               f'text-anchor="middle">{esc(y_label)}</text>')
    for i, s in enumerate(series):
        c = color(i)
        if s.low is not None and s.high is not None and len(s.low) == len(s.xs):
            upper = " ".join(f"{sx(x):.1f},{sy(h):.1f}" for x, h in zip(s.xs, s.high))
            lower = " ".join(f"{sx(x):.1f},{sy(lo):.1f}" for x, lo in reversed(list(zip(s.xs, s.low))))
            out.append(f'<polygon points="{upper} {lower}" fill="{c}" fill-opacity="0.12" stroke="none"/>')
        line = [(x, y) for x, y in zip(s.xs, s.ys) if y is not None]
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        if len(line) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        if len(line) <= 60:
            for x, y in line:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.8" fill="{c}">'
                           f'<title>{esc(s.name)}: {_fmt(x)} → {y:.4g}</title></circle>')
    for i, (s, (lx, row)) in enumerate(zip(series, slots)):
        ly = height + 4 + 18 * row
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        out.append(f'<line x1="{lx:.1f}" x2="{lx + 18:.1f}" y1="{ly + 5}" y2="{ly + 5}" stroke="{color(i)}" '
                   f'stroke-width="3"{dash}/><text x="{lx + 24:.1f}" y="{ly + 9}" class="legend">{esc(s.name)}</text>')
    out.append("</svg>")
    return "".join(out) + note


def _finite(series: Sequence[Series]) -> tuple[list[Series], int]:
    """``series`` without their points that have a non-finite x, y or band value, and how many were left out."""
    out, dropped = [], 0
    for s in series:
        band = s.low is not None and s.high is not None and len(s.low) == len(s.xs) == len(s.high)
        keep = [i for i in range(min(len(s.xs), len(s.ys)))
                if math.isfinite(s.xs[i]) and (s.ys[i] is None or math.isfinite(s.ys[i]))
                and (not band or (math.isfinite(s.low[i]) and math.isfinite(s.high[i])))]
        dropped += min(len(s.xs), len(s.ys)) - len(keep)
        out.append(Series(s.name, [s.xs[i] for i in keep], [s.ys[i] for i in keep],
                          [s.low[i] for i in keep] if band else None, [s.high[i] for i in keep] if band else None,
                          s.dashed))
    return out, dropped


def value_bar(value: float | None, err: float | None = None, vmin: float = 0.0, vmax: float = 1.0,
              threshold: float | None = None, width: int = 150, height: int = 16, fill: str = "#2563eb",
              label: str = "") -> str:
    """A horizontal bar from the zero line (or vmin) to ``value`` with a ±err whisker and a threshold mark."""
    if value is None:
        return '<span class="muted">–</span>'

    def sx(v: float) -> float:
        return 1 + (min(max(v, vmin), vmax) - vmin) / (vmax - vmin) * (width - 2)

    zero = sx(0.0 if vmin <= 0 <= vmax else vmin)
    x0, x1 = sorted((zero, sx(value)))
    out = [f'<svg class="bar" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{esc(label or f"{value:.3f}")}</title>',
           f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" class="track"/>',
           f'<rect x="{x0:.1f}" y="3" width="{max(x1 - x0, 1):.1f}" height="{height - 6}" fill="{fill}" '
           f'fill-opacity="0.75"/>']
    if vmin < 0 < vmax:
        out.append(f'<line x1="{zero:.1f}" x2="{zero:.1f}" y1="1" y2="{height - 1}" stroke="#6b7280"/>')
    if err:
        a, b = sx(value - err), sx(value + err)
        mid = height / 2
        out.append(f'<path d="M{a:.1f} {mid}H{b:.1f}M{a:.1f} {mid - 3}V{mid + 3}M{b:.1f} {mid - 3}V{mid + 3}" '
                   f'stroke="#111827" stroke-width="1.2" fill="none"/>')
    if threshold is not None:
        t = sx(threshold)
        out.append(f'<line x1="{t:.1f}" x2="{t:.1f}" y1="0" y2="{height}" stroke="#dc2626" '
                   f'stroke-width="1.5" stroke-dasharray="2 2"/>')
    out.append("</svg>")
    return "".join(out)


def interval_bar(rate: float | None, low: float | None, high: float | None, width: int = 140,
                 height: int = 16, fill: str = "#2563eb") -> str:
    """A proportion on [0, 1]: a dot at ``rate`` and a whisker over its interval [low, high]."""
    if rate is None:
        return '<span class="muted">–</span>'
    low = rate if low is None else low
    high = rate if high is None else high

    def sx(v: float) -> float:
        return 3 + min(max(v, 0.0), 1.0) * (width - 6)

    mid = height / 2
    return (f'<svg class="bar" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{rate:.3f} [{low:.3f}, {high:.3f}]</title>'
            f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" class="track"/>'
            f'<line x1="{sx(0.5):.1f}" x2="{sx(0.5):.1f}" y1="1" y2="{height - 1}" class="gridv"/>'
            f'<rect x="{sx(low):.1f}" y="{mid - 3}" width="{max(sx(high) - sx(low), 1):.1f}" height="6" '
            f'fill="{fill}" fill-opacity="0.3"/>'
            f'<path d="M{sx(low):.1f} {mid - 4}V{mid + 4}M{sx(high):.1f} {mid - 4}V{mid + 4}" stroke="{fill}" '
            f'stroke-width="1.5"/><circle cx="{sx(rate):.1f}" cy="{mid}" r="3.5" fill="{fill}"/></svg>')


def run_strip(passed: Sequence[bool], size: int = 11) -> str:
    """One square per labeling run: filled when the capability passed that run."""
    width = len(passed) * (size + 2) + 1
    cells = "".join(
        f'<rect x="{1 + i * (size + 2)}" y="1" width="{size}" height="{size}" rx="2" '
        f'class="{"pass" if p else "fail"}"><title>run {i + 1}: {"passed" if p else "failed"}</title></rect>'
        for i, p in enumerate(passed))
    return (f'<svg class="strip" viewBox="0 0 {width} {size + 2}" width="{width}" height="{size + 2}" '
            f'xmlns="http://www.w3.org/2000/svg">{cells}</svg>')
