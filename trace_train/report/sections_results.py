"""Report sections for the second half of a run: GRPO training, routing, evaluation, sample efficiency."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from trace_train.report.html_util import Raw, badge, fmt, not_run, section, table
from trace_train.report.loaders import Loaded, RunData, first_num, num
from trace_train.report.svg import Series, color, esc, interval_bar, line_chart, value_bar

# Display name -> the keys different writers use for it (trace_train.grpo first, the brief's names second).
TRAIN_KEYS: dict[str, tuple[str, ...]] = {
    "reward": ("reward_mean",),
    "success": ("success_rate",),
    # with hints (grpo.hint_fraction > 0) "success" counts the hinted members too; these split it
    "success unhinted": ("success_rate_unhinted",),
    "success hinted": ("success_rate_hinted",),
    "hint log-prob shift": ("hint_logprob_shift",),
    "constant groups": ("constant_group_fraction", "constant_group_frac"),
    "clip frac": ("clip_fraction", "clip_frac"),
    "entropy": ("entropy",),
    "KL": ("kl", "approx_kl", "ref_kl"),
    "grad norm": ("grad_norm",),
    "tokens/s": ("tokens_per_s", "rollout_tokens_per_s"),
    "format valid": ("format_valid",),
    "rollouts": ("rollouts",),
}


def _curve(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[list[float], list[float | None]]:
    xs = [num(r.get("iteration")) if num(r.get("iteration")) is not None else float(i) for i, r in enumerate(rows)]
    return xs, [first_num(r, *keys) for r in rows]


def training_section(run: RunData) -> str:
    if not run.train:
        return section("training", "GRPO training", not_run(Loaded("train/<adapter>/metrics.jsonl"), run.pipeline,
                                                            "training"))
    body, final_rows, success_series = [], [], []
    cards = []
    for adapter, loaded in run.train.items():
        rows = loaded.data or []
        if not rows:
            cards.append(f'<div class="card"><h4>{esc(adapter)}</h4>{not_run(loaded, run.pipeline, "training")}</div>')
            continue
        xs, reward = _curve(rows, TRAIN_KEYS["reward"])
        _, success = _curve(rows, TRAIN_KEYS["success"])
        success_series.append(Series(adapter, xs, success))
        series = [Series("reward (mean)", xs, reward), Series("success rate", xs, success, dashed=True)]
        _, unhinted = _curve(rows, TRAIN_KEYS["success unhinted"])
        if any(v is not None for v in unhinted):
            series.append(Series("success rate, unhinted members", xs, unhinted, dashed=True))
        chart = line_chart(series, "iteration", "value", width=440, height=230)
        warn = f'<p class="note warn">{esc(loaded.error)}</p>' if loaded.error else ""
        cards.append(f'<div class="card"><h4>{esc(adapter)}</h4>{chart}{warn}</div>')
        last = rows[-1]
        final_rows.append([adapter, len(rows)] + [fmt(first_num(last, *k), 3) for k in TRAIN_KEYS.values()])
    if len(success_series) > 1:
        body.append(line_chart(success_series, "iteration", "success rate", (0.0, 1.0), width=640, height=260,
                               title="success rate per adapter"))
    body.append(f'<div class="cards">{"".join(cards)}</div>')
    if final_rows:
        body.append("<h3>Last iteration</h3>")
        body.append(table(("adapter", "iterations", *TRAIN_KEYS), final_rows, "train"))
    return section("training", "GRPO training", "".join(body),
                   "Per-iteration metrics from train/<adapter>/metrics.jsonl (one LoRA adapter per capability).")


def _rate_cell(entry: Any, i: int) -> Raw | None:
    if not isinstance(entry, dict):
        return None
    rate, low, high = num(entry.get("rate")), num(entry.get("low")), num(entry.get("high"))
    if rate is None:
        return None
    n = entry.get("n")
    return Raw(f'<div class="rate">{interval_bar(rate, low, high, width=120, fill=color(i))}'
               f'<span class="num">{rate:.2f} <span class="muted">[{fmt(low, 2)}, {fmt(high, 2)}]'
               f'{f" n={esc(n)}" if n is not None else ""}</span></span></div>')


def evaluation_section(run: RunData) -> str:
    doc = run.eval.data
    if not isinstance(doc, dict) or not isinstance(doc.get("policies"), dict):
        return section("evaluation", "Evaluation", not_run(run.eval, run.pipeline, "evaluation"))
    policies = {str(k): v for k, v in doc["policies"].items() if isinstance(v, dict)}
    names = list(policies)
    caps = sorted({c for p in policies.values() for c in (p.get("per_capability") or {})})
    rows: list[list[Any]] = [[Raw("<b>all tasks</b>")] + [_rate_cell(p.get("overall"), i)
                                                        for i, p in enumerate(policies.values())]]
    targets = doc.get("targets") if isinstance(doc.get("targets"), dict) else {}
    for env_id, per_policy in targets.items():  # several targets: each one's overall rate
        per_policy = per_policy if isinstance(per_policy, dict) else {}
        rows.append([Raw(f"<code>{esc(env_id)}</code>")]
                    + [_rate_cell((per_policy.get(n) or {}).get("overall"), i) for i, n in enumerate(names)])
    for cap in caps:
        rows.append([cap] + [_rate_cell((p.get("per_capability") or {}).get(cap), i)
                             for i, p in enumerate(policies.values())])
    rows.append(["mean reward"] + [fmt(p.get("mean_reward")) for p in policies.values()])
    ks = sorted({str(k) for p in policies.values() for k in (p.get("pass_k") or {})},
                key=lambda k: int(k) if k.isdigit() else 0)
    for k in ks:
        rows.append([f"pass^{k}"] + [fmt((p.get("pass_k") or {}).get(k)) for p in policies.values()])
    best = max(names, key=lambda n: num((policies[n].get("overall") or {}).get("rate")) or -1.0, default=None)
    head = (f'<p>Env <code>{esc(doc.get("env", "?"))}</code>, split <code>{esc(doc.get("split", "?"))}</code>, '
            f'{esc(doc.get("episodes", "?"))} seeds × {esc(doc.get("trials", "?"))} trials; '
            f'best overall: <b>{esc(best)}</b>. Bars: success rate with its 95 % Wilson interval '
            "(grid line at 0.5).</p>")
    notes = "".join(f'<p class="note warn">{esc(text)}</p>' for text in zero_score_notes(run, policies))
    return section("evaluation", "Evaluation (held-out)",
                   head + table(["tasks requiring"] + names, rows, "eval") + notes)


BASELINE_MEANING = {
    "base": "the base model without adapters",
    "prompted": "the base model with the selected capabilities' descriptions added to its system prompt",
    "grpo_target": "GRPO directly on the target env with TRACE's rollout budget",
    "mixture": "one adapter trained by GRPO on the mixture of all capability envs",
    "sft": "SFT on the successful capability-env rollouts",
}


def zero_score_notes(run: RunData, policies: dict[str, dict[str, Any]]) -> list[str]:
    """One sentence per policy whose held-out success is 0: what it is and how its episodes ended."""
    notes = []
    for name, result in policies.items():
        overall = result.get("overall") if isinstance(result.get("overall"), dict) else {}
        if num(overall.get("rate")) != 0.0:
            continue
        n = overall.get("n", "?")
        what = BASELINE_MEANING.get(name) or BASELINE_MEANING.get(name.split(":")[0], "")
        text = f"{name}{f' ({what})' if what else ''} solved none of the {n} held-out episodes."
        loaded = run.trajectories.get(f"eval: {name}")
        rows = (loaded.data or []) if loaded is not None else []
        if rows:
            ends = Counter(str(r.get("termination", "?")) for r in rows)
            (end, count), = ends.most_common(1)
            text += f" Most episodes ended by '{end}' ({count} of {len(rows)} sampled)"
            fmt_ok = [num((r.get("info") or {}).get("format_valid_fraction")) for r in rows
                      if isinstance(r.get("info"), dict)]
            fmt_ok = [v for v in fmt_ok if v is not None]
            if fmt_ok:
                text += f"; {sum(fmt_ok) / len(fmt_ok):.0%} of its turns were well-formed tool calls or replies"
            rewards = [num(r.get("reward")) for r in rows]
            rewards = [v for v in rewards if v is not None]
            if rewards:
                text += f"; mean reward {sum(rewards) / len(rewards):.3f}"
            text += ". See its trajectories in the viewer below."
        else:
            text += " Its trajectories are not in the run directory, so the report cannot say why."
        notes.append(text)
    return notes


def efficiency_section(run: RunData) -> str:
    doc = run.sample_efficiency.data
    curves = doc.get("curves") if isinstance(doc, dict) else None
    if not isinstance(curves, dict) or not curves:
        return section("efficiency", "Sample efficiency", not_run(run.sample_efficiency, run.pipeline, "efficiency"))
    series = []
    for name, points in curves.items():
        pts = sorted((p for p in (points or []) if isinstance(p, (list, tuple)) and len(p) >= 2
                      and num(p[0]) is not None and num(p[1]) is not None), key=lambda p: p[0])
        if not pts:
            continue
        has_band = all(len(p) >= 4 and num(p[2]) is not None and num(p[3]) is not None for p in pts)
        series.append(Series(str(name), [float(p[0]) for p in pts], [float(p[1]) for p in pts],
                             [float(p[2]) for p in pts] if has_band else None,
                             [float(p[3]) for p in pts] if has_band else None))
    chart = line_chart(series, "training rollouts (episodes)", "held-out success rate", (0.0, 1.0),
                       width=680, height=320)
    return section("efficiency", "Sample efficiency", chart,
                   "Held-out success vs training rollouts; shaded: 95 % interval.")


def routing_section(run: RunData) -> str:
    r = run.routing.data
    if not isinstance(r, dict):
        return section("routing", "Routing (composed model)", not_run(run.routing, run.pipeline, "routing"))
    slots = [str(s) for s in r.get("slot_names") or []]
    load = [num(v) for v in r.get("load") or []]
    if len(slots) < len(load):
        slots += [f"slot {i}" for i in range(len(slots), len(load))]
    body = []
    if r.get("collapsed"):
        top = max(range(len(load)), key=lambda i: load[i] or 0.0) if load else None
        who = f" onto slot <b>{esc(slots[top])}</b>" if top is not None else ""
        body.append(f'<p class="note bad">Routing collapse{who}: one slot takes most tokens.</p>')
    if r.get("scope") == "episode":
        return _episode_routing_section(r, slots, load)
    n_slots = max(len(load), 1)
    state = badge("collapsed", "bad") if r.get("collapsed") else badge("no collapse", "ok")
    body.append(f'<p>{state} '
                f'token accuracy <b>{fmt(r.get("token_accuracy"))}</b> · episode accuracy '
                f'<b>{fmt(r.get("episode_accuracy"))}</b> · mean entropy <b>{fmt(r.get("entropy"))}</b> nats '
                f'(uniform: {math.log(n_slots):.3f}) · {esc(r.get("num_tokens", "?"))} tokens</p>')
    rows = [(s, Raw(f'{value_bar(v, width=200, fill=color(i))} <span class="num">{fmt(v)}</span>'))
            for i, (s, v) in enumerate(zip(slots, load))]
    body.append(table(("slot", "load (fraction of tokens)"), rows, "routing"))
    per_layer = r.get("load_per_layer")
    if isinstance(per_layer, list) and per_layer:
        hrows = []
        for li, layer in enumerate(per_layer):
            cells: list[Any] = [f"block {li}"]
            for v in layer if isinstance(layer, list) else []:
                x = num(v) or 0.0
                cells.append(Raw(f'<span class="heat" style="background:rgba(37,99,235,{x:.3f})">{x:.2f}</span>'))
            hrows.append(cells)
        body.append(f"<details><summary>load per block</summary>{table(['block'] + slots, hrows, 'heatmap')}</details>")
    return section("routing", "Routing (composed model)", "".join(body),
                   "Top-1 routing of the trained gates on held-out examples (slot 0 = base, no adapter).")


def _episode_routing_section(r: dict[str, Any], slots: list[str], load: list[float | None]) -> str:
    """``moe.gate.scope=episode``: the learned router's held-out episode accuracy, load and confusion."""
    body = [f'<p>episode router · held-out episode accuracy <b>{fmt(r.get("episode_accuracy"))}</b> over '
            f'{esc(r.get("episodes", "?"))} capability-env episodes</p>']
    rows = [(s, Raw(f'{value_bar(v, width=200, fill=color(i))} <span class="num">{fmt(v)}</span>'))
            for i, (s, v) in enumerate(zip(slots, load))]
    body.append(table(("slot", "load (fraction of episodes)"), rows, "routing"))
    confusion = r.get("confusion")
    if isinstance(confusion, list) and confusion:
        rows_c = [[slots[i], *row] for i, row in enumerate(confusion)]
        body.append("<details><summary>confusion (rows: the episode's capability, columns: the routed slot)"
                    f"</summary>{table(['label'] + slots, rows_c, 'heatmap')}</details>")
    return section("routing", "Routing (composed model)", "".join(body),
                   "Top-1 slot the episode router picks from each held-out episode's first user message "
                   "(slot 0 = base, no adapter).")
