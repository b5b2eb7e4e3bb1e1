"""Report sections for the first half of a run: pipeline stages, capability analysis, env calibration."""

from __future__ import annotations

import json
from typing import Any

from trace_train.report.html_util import Raw, badge, fmt, not_run, section, table
from trace_train.report.loaders import RunData, first_num, num
from trace_train.report.stage_time import elapsed_seconds
from trace_train.report.svg import esc, run_strip, value_bar

STATUS_KIND = {"done": "ok", "skipped": "muted", "failed": "bad", "running": "warn", "this page": "ok"}


def pipeline_section(run: RunData) -> str:
    doc = run.pipeline.data
    if not isinstance(doc, dict):
        return section("pipeline", "Pipeline stages", not_run(run.pipeline, run.pipeline, "pipeline"))
    stages = doc.get("stages") if isinstance(doc.get("stages"), dict) else {}
    walls = [w for w in (num(s.get("wall_s")) for s in stages.values() if isinstance(s, dict)) if w is not None]
    longest = max(walls, default=0.0) or 1.0
    rows = []
    for name, entry in stages.items():
        entry = entry if isinstance(entry, dict) else {}
        status = str(entry.get("status", "unknown"))
        if name == "report" and status == "running":
            status = "this page"  # the report is written while its own stage runs
        wall = num(entry.get("wall_s"))
        rows.append((name, Raw(badge(status, STATUS_KIND.get(status, "muted"))),
                     None if wall is None else f"{wall:,.1f} s",
                     Raw(value_bar(wall, vmax=longest, width=180, fill="#6b7280", label=f"{wall:.1f} s"))
                     if wall is not None else None,
                     entry.get("hash")))
    body = [f'<p>Target env: <code>{esc(doc.get("target_env", "?"))}</code> · {len(stages)} stages · '
            f'wall time of the run {elapsed_seconds(stages):,.1f} s (stages that ran at once count once)</p>']
    body.append(table(("stage", "status", "wall time", "", "hash"), rows, "stages") if rows
                else '<p class="note">pipeline.json lists no stages.</p>')
    if doc.get("config") is not None:
        pretty = json.dumps(doc["config"], indent=2, sort_keys=True, default=str)
        body.append(f"<details><summary>run configuration</summary><pre>{esc(pretty)}</pre></details>")
    return section("pipeline", "Pipeline stages", "".join(body))


def _per_run(candidates: list[dict[str, Any]]) -> dict[str, list[bool]]:
    out = {}
    for c in candidates:
        runs = c.get("per_run")
        if isinstance(runs, list):
            out[str(c.get("name"))] = [bool(r.get("passed")) for r in runs if isinstance(r, dict)]
    return out


def _cap_cells(c: dict[str, Any], thresholds: dict[str, Any], strips: dict[str, list[bool]],
               n_runs: int) -> list[Any]:
    delta, cov = num(c.get("mean_delta")), num(c.get("mean_cov"))
    d_std, c_std = num(c.get("std_delta")), num(c.get("std_cov"))
    passed, total = c.get("n_runs_passed"), c.get("n_runs_total", n_runs)
    strip = strips.get(str(c.get("name")))
    freq = f"{passed}/{total}" if passed is not None else "–"
    return [
        Raw(f'<b>{esc(c.get("name", "?"))}</b><div class="desc">{esc(c.get("description", ""))}</div>'),
        Raw(value_bar(delta, d_std, -1.0, 1.0, num(thresholds.get("delta")), fill="#7c3aed",
                      label=f"Δ {fmt(delta)} ± {fmt(d_std)}")
            + f' <span class="num">{fmt(delta, 2, True)} ± {fmt(d_std, 2)}</span>'),
        Raw(value_bar(cov, c_std, 0.0, 1.0, num(thresholds.get("rho")), fill="#059669",
                      label=f"Cov {fmt(cov)} ± {fmt(c_std)}")
            + f' <span class="num">{fmt(cov, 2)} ± {fmt(c_std, 2)}</span>'),
        Raw(f'<span class="num">{esc(freq)}</span> ' + (run_strip(strip) if strip else "")),
    ]


def _support_median(c: dict[str, Any]) -> Any:
    support = c.get("er_plus_support")
    return support.get("median", "?") if isinstance(support, dict) else "?"


def skipped_capabilities(run: RunData, selected: list[str]) -> dict[str, str]:
    """Why each selected capability got no adapter, from the pipeline's synthesis stage (its family envs, the LLM
    env generator's results) and its config."""
    state = run.pipeline.data if isinstance(run.pipeline.data, dict) else {}
    stages = state.get("stages") if isinstance(state.get("stages"), dict) else {}
    syn = stages.get("synthesis") if isinstance(stages.get("synthesis"), dict) else None
    if syn is None or syn.get("status") != "done":
        return {}
    outputs = syn.get("outputs") if isinstance(syn.get("outputs"), dict) else {}
    envs = outputs.get("envs") if isinstance(outputs.get("envs"), dict) else {}
    no_family = set(outputs.get("no_family") or [])
    failed = {str(f.get("capability")): f for f in outputs.get("failed") or [] if isinstance(f, dict)}
    tried = outputs.get("llm") if isinstance(outputs.get("llm"), list) else []  # synthesis.generator=llm
    llm = {str(r.get("capability")): r for r in tried if isinstance(r, dict)}
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    configured = config.get("capabilities")
    cap = (config.get("train") or {}).get("max_capabilities") if isinstance(config.get("train"), dict) else None
    out: dict[str, str] = {}
    for name in selected:
        if name in envs:
            continue
        if isinstance(configured, list) and name not in configured:
            out[name] = "not in pipeline.capabilities (the configured list replaces the analysis' selection)"
        elif name in no_family:
            out[name] = ("no built-in env family builds it; it needs the LLM env generator "
                         "(trace-rl synthesize with an LLM endpoint)")
        elif name in failed and not failed[name].get("emitted"):
            out[name] = ("calibration never reached the success gate and synthesis.accept_closest is off, "
                         "so no env was emitted")
        elif name in llm and not llm[name].get("accepted"):
            out[name] = f"the LLM env generator accepted no env: {llm[name].get('reason') or 'no reason recorded'}"
        else:
            limit = f"={cap}" if cap is not None else ""
            out[name] = (f"over the adapter cap pipeline.train.max_capabilities{limit}: the highest-Δ buildable "
                         "capabilities took the places")
    return out


def capabilities_section(run: RunData) -> str:
    doc = run.selected.data
    if not isinstance(doc, dict):
        return section("analysis", "Capability analysis", not_run(run.selected, run.pipeline, "analysis"))
    th = doc.get("thresholds") if isinstance(doc.get("thresholds"), dict) else {}
    n_runs = doc.get("n_runs", "?")
    totals = doc.get("totals") if isinstance(doc.get("totals"), dict) else {}
    candidates = [c for c in doc.get("candidates", []) if isinstance(c, dict)]
    selected = [c for c in doc.get("selected", []) if isinstance(c, dict)]
    strips = _per_run(candidates)
    body = [f'<p>ρ = {esc(th.get("rho", "?"))} · δ = {esc(th.get("delta", "?"))} · K = {esc(th.get("k", "?"))} '
            f'of N = {esc(n_runs)} runs · {esc(totals.get("episodes", "?"))} trajectories '
            f'({esc(totals.get("failed", "?"))} failed, {esc(totals.get("passed", "?"))} passed)'
            + (f' · labeler <code>{esc(doc["run"].get("labeler"))}</code>' if isinstance(doc.get("run"), dict) else "")
            + "</p>"]
    missing = doc.get("missing_pairs")
    if isinstance(missing, dict) and missing.get("total"):
        body.append(f'<p class="note warn">{esc(missing["total"])} (trajectory, capability) pairs were never '
                    f"labeled and are excluded.</p>")
    headers = ("capability", "Δ = ER⁻ − ER⁺ (mean ± std; red: δ)", "Cov (mean ± std; red: ρ)", "runs passed")
    body.append("<h3>Selected capabilities</h3>")
    if selected:
        body.append(table(headers, [_cap_cells(c, th, strips, n_runs) for c in selected], "caps selected"))
        skipped = skipped_capabilities(run, [str(c.get("name")) for c in selected])
        if skipped:
            items = "".join(f"<li><b>{esc(name)}</b>: {esc(why)}</li>" for name, why in skipped.items())
            body.append(f'<p class="note warn">Selected but not trained:</p><ul>{items}</ul>')
    else:
        body.append('<p class="note">No capability passed the consistency filter.</p>')
    thin = [c for c in candidates if c.get("thin_er_plus_support")]
    if thin:
        items = "".join(f'<li><b>{esc(c.get("name", "?"))}</b>: a median of '
                        f'{esc(_support_median(c))} per run</li>' for c in thin)
        body.append('<p class="note warn">ER⁺ rests on very few labeled passed episodes for these candidates, so '
                    f"their Δ is decided by label noise:</p><ul>{items}</ul>")
    dropped = [c for c in candidates if not c.get("keep", c.get("passes_consistency", False))]
    body.append("<h3>Dropped candidates</h3>")
    if dropped:
        rows = [_cap_cells(c, th, strips, n_runs) + [c.get("reason", "")] for c in dropped]
        body.append(table(headers + ("why",), rows, "caps dropped"))
    else:
        body.append('<p class="note">No candidate was dropped.</p>' if candidates
                    else '<p class="note">The file lists no candidates.</p>')
    if run.label_runs:
        body.append(f'<p class="muted">{len(run.label_runs)} per-run label files in <code>analysis/labels/</code>; '
                    "the trajectory viewer shows each target rollout's majority label per capability.</p>")
    return section("analysis", "Capability analysis", "".join(body),
                   "Contrastive analysis: a capability is kept when Cov ≥ ρ and Δ ≥ δ in at least K of N runs.")


def _envs(doc: Any) -> list[dict[str, Any]]:
    entries = doc.get("envs", doc.get("entries", [])) if isinstance(doc, dict) else doc
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _knobs_cell(e: dict) -> str:
    """The knobs of a family env, or the provenance of an LLM-written one (model, accepted attempt)."""
    prov = e.get("provenance") if isinstance(e.get("provenance"), dict) else {}
    if str(e.get("generator", "")).startswith("llm"):
        return (f'<span class="small">LLM-written by {esc(str(prov.get("model", "?")))} (attempt '
                f'{esc(str(prov.get("accepted_attempt", "?")))} of {esc(str(prov.get("attempts", "?")))})</span>')
    return f'<code class="small">{esc(json.dumps(e.get("knobs", {}), sort_keys=True))}</code>'


def calibration_section(run: RunData) -> str:
    if run.manifest.data is None:
        return section("synthesis", "Synthesized environments", not_run(run.manifest, run.pipeline, "synthesis"))
    envs = _envs(run.manifest.data)
    if not envs:
        return section("synthesis", "Synthesized environments",
                       '<p class="note">The manifest lists no emitted environments.</p>')
    rows = []
    for e in envs:
        cal = e.get("calibration") if isinstance(e.get("calibration"), dict) else {}
        succ = first_num(cal, "success_rate")
        pak = cal.get("pass_at_k") if isinstance(cal.get("pass_at_k"), dict) else {}
        gate = cal.get("passed_gate", e.get("passed_gate"))
        size = (f'{cal["n_seeds"]}×{cal["group_size"]}' if "n_seeds" in cal and "group_size" in cal else None)
        hinted, unhinted = (cal.get(k) if isinstance(cal.get(k), dict) else {} for k in ("hinted", "unhinted"))
        with_hints = e.get("needs_hints") is True
        rows.append((
            Raw(f'<code>{esc(e.get("env_id", "?"))}</code>'), e.get("capability"), e.get("domain"),
            Raw(_knobs_cell(e)), size,
            fmt(first_num(cal, "mean_reward")),
            Raw(f'{value_bar(succ, width=90, fill="#2563eb")} <span class="num">{fmt(succ)}</span>'),
            fmt(first_num(cal, "reward_std")),
            fmt(first_num(cal, "frac_all_success", "all_success_frac")),
            fmt(first_num(cal, "frac_all_zero", "all_zero_frac")),
            fmt(first_num(cal, "frac_constant", "constant_frac")),
            ", ".join(f"@{k}: {fmt(v, 2)}" for k, v in pak.items()) or None,
            fmt(first_num(hinted, "success_rate")), fmt(first_num(unhinted, "success_rate")),
            Raw(badge("with hints", "ok") if gate is True and with_hints else badge("yes", "ok") if gate is True
                else badge("no", "bad") if gate is False else badge("emitted", "ok")),
        ))
    headers = ("env", "capability", "domain", "knobs", "seeds×G", "mean reward", "success", "reward std",
               "all-success", "all-zero", "constant", "pass@k", "success hinted", "success unhinted", "gate")
    stage = ((run.pipeline.data or {}).get("stages") or {}).get("synthesis") or {}
    policy = {"model": "the base model", "scripted": "the scripted expert"}.get(
        (stage.get("outputs") or {}).get("calibrated_with"), "the calibration policy")
    return section("synthesis", "Synthesized environments", table(headers, rows, "calib"),
                   f"Calibration rollouts of {policy} on each emitted env (fractions are over groups). "
                   "Gate “no”: no difficulty setting passed and the closest one was emitted (accept_closest). "
                   "Gate “with hints”: the env passes with its hinted members (synthesis.hint_fraction) and not "
                   "on the unhinted ones alone (paper §3.5's remedy for an env too hard unhinted); train it with "
                   "the same grpo.hint_fraction.")
