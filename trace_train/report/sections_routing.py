"""The routing trace in the report: per capability, the share of its tasks' generated tokens on each slot, and a
picker over a few held-out TRACE trajectories whose generated tokens are coloured by the slot the gates chose.

Reads ``routing/routing_trace.json`` (written by ``trace_moe.routing_trace.write_routing_trace``). Every
trajectory is rendered server-side (bounded by the trace's own sample and token limits); the small script only
shows the one the ``<select>`` picks, so the page reads without JavaScript too (the first one is shown).
"""

from __future__ import annotations

from typing import Any

from trace_train.report.html_util import Raw, fmt, table
from trace_train.report.loaders import Loaded, RunData, load_json, num
from trace_train.report.svg import color, esc, value_bar

ROUTING_TRACE = "routing/routing_trace.json"
MAX_RECORDS = 12  # trajectories shown at most, whatever the file holds
MAX_TOKENS = 600  # tokens per trajectory shown at most

PICK_JS = (
    "(function(){var s=document.getElementById('rt-pick');if(!s)return;function show(){"
    "var ps=document.querySelectorAll('#routing .rt-traj');for(var i=0;i<ps.length;i++){"
    "ps[i].hidden=ps[i].getAttribute('data-i')!==s.value;}}s.addEventListener('change',show);show();})();"
)
STYLE = (".rt-tok{white-space:pre-wrap;border-radius:2px;padding:0 1px;color:#fff}"
         ".rt-legend span{display:inline-block;margin-right:.8em}.rt-text{font-family:monospace;line-height:1.7}")


def load_routing_trace(run: RunData) -> Loaded:
    return load_json(run.run_dir, ROUTING_TRACE)


def _slot_names(doc: dict[str, Any]) -> list[str]:
    return [str(s) for s in doc.get("slot_names") or []]


def _legend(slots: list[str]) -> str:
    items = "".join(f'<span><span class="rt-tok" style="background:{color(i)}">&nbsp;{i}&nbsp;</span> {esc(name)}'
                    f"</span>" for i, name in enumerate(slots))
    return f'<p class="rt-legend">{items}</p>'


def _capability_table(doc: dict[str, Any], slots: list[str]) -> str:
    rows = []
    for row in doc.get("by_capability") or []:
        if not isinstance(row, dict):
            continue
        shares = [num(v) for v in row.get("shares") or []]
        cells: list[Any] = [row.get("capability", "?"), row.get("tasks"), row.get("tokens")]
        for i in range(len(slots)):
            v = shares[i] if i < len(shares) else None
            cells.append(Raw(f'{value_bar(v, width=80, fill=color(i))} <span class="num">{fmt(v, 2)}</span>'))
        rows.append(cells)
    if not rows:
        return '<p class="note">The routing trace has no tokens to tabulate.</p>'
    return table(["capability", "tasks", "tokens", *slots], rows, "routing-caps")


def _trajectory(i: int, rec: dict[str, Any], slots: list[str]) -> str:
    tokens = [str(t) for t in rec.get("tokens") or []][:MAX_TOKENS]
    chosen = list(rec.get("slots") or [])[:len(tokens)]
    spans = []
    for text, slot in zip(tokens, chosen):
        s = slot if isinstance(slot, int) and 0 <= slot < len(slots) else None
        bg = color(s) if s is not None else "#9ca3af"
        name = slots[s] if s is not None else "?"
        spans.append(f'<span class="rt-tok" data-slot="{esc(s)}" title="{esc(name)}" '
                     f'style="background:{bg}">{esc(text)}</span>')
    caps = ", ".join(esc(c) for c in rec.get("caps") or []) or '<span class="muted">none annotated</span>'
    n = rec.get("n_tokens")
    more = (f' <span class="muted">(first {len(tokens)} of {esc(n)} generated tokens)</span>'
            if isinstance(n, int) and n > len(tokens) else "")
    outcome = "success" if rec.get("success") else "failure"
    return (f'<div class="rt-traj" data-i="{i}"{"" if i == 0 else " hidden"}>'
            f"<p>{esc(rec.get('env', '?'))} seed {esc(rec.get('seed'))} · {outcome} · required capabilities: "
            f"<b>{caps}</b>{more}</p><div class=\"rt-text\">{''.join(spans)}</div></div>")


def routing_trace_html(run: RunData) -> str:
    """The part of the Routing section about the per-token trace (a clear note when there is none)."""
    loaded = load_routing_trace(run)
    doc = loaded.data
    if loaded.error or not isinstance(doc, dict):
        why = (f"could not read <code>{esc(loaded.rel)}</code>: {esc(loaded.error or 'not a JSON object')}"
               if loaded.error or loaded.ok else f"<code>{esc(loaded.rel)}</code> not found")
        return (f'<h3>Routing per capability</h3><p class="note">No routing trace: {why}. The pipeline writes it '
                "after evaluating a composed model (<code>pipeline.report.routing_sample</code>).</p>")
    slots = _slot_names(doc)
    every = [r for r in doc.get("records") or [] if isinstance(r, dict)]
    records = every[:MAX_RECORDS]
    sample = doc.get("sample") if isinstance(doc.get("sample"), int) else len(every)  # what the table covers
    shown = f"; the first {len(records)} of them below" if len(records) < sample else ""
    parts = [f"<style>{STYLE}</style><h3>Routing per capability</h3>",
             f"<p>Share of the generated tokens of the tasks needing each capability that the gates routed to "
             f"each slot, over {sample} held-out trajectories of <code>{esc(doc.get('source', '?'))}</code> "
             f"(a token's slot: the top-1 slot most blocks chose in the step that produced it){shown}.</p>",
             _capability_table(doc, slots), "<h3>Watch the routing</h3>", _legend(slots)]
    if records:
        options = "".join(
            f'<option value="{i}">{esc(r.get("env", "?"))} seed {esc(r.get("seed"))} · '
            f'{"success" if r.get("success") else "failure"} · {esc(", ".join(map(str, r.get("caps") or [])))}'
            "</option>" for i, r in enumerate(records))
        parts.append(f'<label>trajectory <select id="rt-pick">{options}</select></label>')
        parts.extend(_trajectory(i, r, slots) for i, r in enumerate(records))
        parts.append(f"<script>{PICK_JS}</script>")
    else:
        parts.append('<p class="note">The routing trace holds no trajectories.</p>')
    return "".join(parts)


def with_routing_trace(section_html: str, run: RunData) -> str:
    """The Routing section with the trace appended inside it."""
    extra = routing_trace_html(run)
    if section_html.endswith("</section>"):
        return section_html[: -len("</section>")] + extra + "</section>"
    return section_html + extra
