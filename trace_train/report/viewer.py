"""The trajectory viewer's data: a bounded, truncated sample of each trajectory file, embedded as JSON.

The JSON goes into a ``<script type="application/json">`` block; :func:`embed_json` escapes ``<``,
``>`` and ``&`` so no content (e.g. a message holding ``</script>``) can end that block, and the
page's JS only ever writes it with ``textContent``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trace_envs.records import task_capabilities
from trace_train.report.loaders import Loaded, RunData, num

GAP_KEEP_TAIL = 6
MAX_TOOL_CALLS = 20  # per message (a generation loop can emit thousands)
NAME_CHARS = 200  # names, ids, roles and other short fields
MIN_BYTES = 10_000  # the least viewer.max_bytes: room for the data's frame whatever the files hold


@dataclass(frozen=True)
class ViewerLimits:
    """Bounds that keep the report small: per source, in all, and on the embedded JSON's size."""

    max_per_policy: int = 40
    max_messages: int = 60
    max_chars: int = 1500
    max_tool_chars: int = 800
    max_total: int = 150  # trajectories over all sources (shared evenly, unused shares passed on)
    max_bytes: int = 1_500_000  # embedded JSON; sources are thinned (most bytes first) until it fits

    def __post_init__(self) -> None:
        for key in ("max_per_policy", "max_messages", "max_chars", "max_tool_chars", "max_total", "max_bytes"):
            least = MIN_BYTES if key == "max_bytes" else 1
            if int(getattr(self, key)) < least:
                raise ValueError(f"viewer.{key} must be >= {least}, got {getattr(self, key)}")


def share(totals: Sequence[int], per_source: int, budget: int) -> list[int]:
    """How many items each source gets: at most ``per_source`` and its total, ``budget`` in all, split
    evenly with what a small source leaves over going to the others."""
    want = [min(t, per_source) for t in totals]
    got = [0] * len(want)
    left = budget
    while left > 0 and any(g < w for g, w in zip(got, want)):
        open_ = [i for i, (g, w) in enumerate(zip(got, want)) if g < w]
        each = max(1, left // len(open_))
        for i in open_:
            add = min(each, want[i] - got[i], left)
            got[i] += add
            left -= add
            if left == 0:
                break
    return got


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit:,} more characters]"


def sample_indices(success: Sequence[bool], limit: int) -> list[int]:
    """At most ``limit`` indices in file order, half failures and half successes where both exist."""
    if len(success) <= limit:
        return list(range(len(success)))
    fails = [i for i, ok in enumerate(success) if not ok]
    wins = [i for i, ok in enumerate(success) if ok]
    n_fail = min(len(fails), max(limit // 2, limit - len(wins)))
    return sorted(fails[:n_fail] + wins[: limit - n_fail])


def _capabilities(row: dict[str, Any]) -> list[str]:
    info = row.get("info") if isinstance(row.get("info"), dict) else {}  # a raw row: not validated yet
    caps = task_capabilities(info)
    if caps is None and isinstance(info.get("capability"), str):
        caps = [info["capability"]]
    return caps or []


def _tool_calls(msg: dict[str, Any], limit: int) -> list[dict[str, str]]:
    """The message's tool calls (name, pretty arguments), at most :data:`MAX_TOOL_CALLS` and a marker for the rest."""
    calls: list[dict[str, str]] = []
    found = [call for call in msg.get("tool_calls") or [] if isinstance(call, dict)]
    for call in found[:MAX_TOOL_CALLS]:
        fn = call.get("function") if isinstance(call.get("function"), dict) else call
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, RecursionError):
                pass
        pretty = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False, default=str)
        calls.append({"n": clip(str(fn.get("name", "?")), NAME_CHARS), "a": clip(pretty, limit)})
    if len(found) > MAX_TOOL_CALLS:
        calls.append({"n": "…", "a": f"{len(found) - MAX_TOOL_CALLS:,} more tool calls left out"})
    return calls


def compact_messages(messages: list[Any], limits: ViewerLimits, systems: dict[str, int]) -> list[dict[str, Any]]:
    """Messages as small dicts (role, clipped content, tool calls); system prompts deduplicated.

    Beyond ``max_messages`` the head and the last few are kept around one "gap" marker.
    """
    msgs = [m for m in messages if isinstance(m, dict)]
    omitted = 0
    if len(msgs) > limits.max_messages:
        tail = min(GAP_KEEP_TAIL, limits.max_messages // 2)
        omitted = len(msgs) - limits.max_messages
        msgs = msgs[: limits.max_messages - tail] + [None] + (msgs[-tail:] if tail else [])
    out: list[dict[str, Any]] = []
    for m in msgs:
        if m is None:
            out.append({"r": "gap", "c": f"… {omitted} messages omitted …"})
            continue
        role = clip(str(m.get("role", "?")), NAME_CHARS)
        content = m.get("content")
        content = "" if content is None else content if isinstance(content, str) else json.dumps(content, default=str)
        if role == "system":
            out.append({"r": role, "s": systems.setdefault(clip(content, 20 * limits.max_chars), len(systems))})
            continue
        entry: dict[str, Any] = {"r": role,
                                 "c": clip(content, limits.max_tool_chars if role == "tool" else limits.max_chars)}
        if role == "tool" and m.get("name"):
            entry["n"] = clip(str(m["name"]), NAME_CHARS)
        calls = _tool_calls(m, limits.max_chars)
        if calls:
            entry["tc"] = calls
        out.append(entry)
    return out


def majority_labels(label_runs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """episode id -> capability -> the label most runs gave (NA and missing left out)."""
    votes: dict[tuple[str, str], Counter[str]] = {}
    for run in label_runs:
        for cap, lists in (run.get("labels") or {}).items():
            if not isinstance(lists, dict):
                continue
            for key, ids in lists.items():
                label = key.split("_")[0].upper()
                if label not in ("LACKING", "PRESENT", "NA") or not isinstance(ids, list):
                    continue
                for eid in ids:
                    votes.setdefault((str(eid), cap), Counter())[label] += 1
    out: dict[str, dict[str, str]] = {}
    for (eid, cap), counter in votes.items():
        label = counter.most_common(1)[0][0]
        if label != "NA":
            out.setdefault(eid, {})[cap] = label
    return out


def _source(name: str, loaded: Loaded, limits: ViewerLimits, systems: dict[str, int],
            labels: dict[str, dict[str, str]], limit: int) -> dict[str, Any]:
    rows = loaded.data or []
    keep = sample_indices([bool(r.get("success")) for r in rows], limit)
    items = []
    for i in keep:
        row = rows[i]
        eid = str(row.get("episode_id") or f"{row.get('env_id')}|{row.get('seed')}|{row.get('policy')}")
        seed = row.get("seed")
        item = {
            "id": clip(eid, NAME_CHARS), "env": clip(str(row.get("env_id", "?")), NAME_CHARS),
            "seed": seed if isinstance(seed, int) else clip(seed, NAME_CHARS) if isinstance(seed, str) else None,
            "policy": clip(str(row.get("policy", "?")), NAME_CHARS), "reward": num(row.get("reward")),
            "success": bool(row.get("success")), "end": clip(str(row.get("termination", "?")), NAME_CHARS),
            "caps": [clip(str(c), NAME_CHARS) for c in _capabilities(row)],
            "msgs": compact_messages(row.get("messages") or [], limits, systems),
        }
        if eid in labels:
            item["labels"] = labels[eid]
        items.append(item)
    total = loaded.total if loaded.total is not None else len(rows)
    return {"name": name, "file": loaded.rel, "total": total, "success": sum(bool(r.get("success")) for r in rows),
            "error": clip(loaded.error, 1000) if loaded.error else None, "items": items}


def _size(obj: Any) -> int:
    # a lone surrogate counts as the 3 bytes of the U+FFFD that replaces it in the page
    return len(embed_json(obj).encode("utf-8", "surrogatepass"))


def viewer_data(run: RunData, limits: ViewerLimits = ViewerLimits()) -> dict[str, Any]:
    """The JSON document the viewer reads: sources (one per trajectory file) and deduplicated system prompts.

    Over ``limits.max_bytes`` a file's only trajectory that exceeds the budget alone is left out, else the source
    with the most bytes is halved (down to one, then to none), then the last sources are left out; ``left_out``
    counts the sampled trajectories and the files so dropped."""
    labels = majority_labels(run.label_runs)
    names = list(run.trajectories)
    counts = share([len(run.trajectories[n].data or []) for n in names], limits.max_per_policy, limits.max_total)
    sampled = sum(counts)
    while True:
        systems: dict[str, int] = {}
        sources = [_source(name, run.trajectories[name], limits, systems,
                           labels if name == "target rollouts" else {}, n) for name, n in zip(names, counts)]
        doc = {"sources": sources, "systems": [text for text, _ in sorted(systems.items(), key=lambda kv: kv[1])],
               "limits": {"max_per_policy": limits.max_per_policy, "max_total": limits.max_total,
                          "max_bytes": limits.max_bytes},
               "left_out": {"trajectories": sampled - sum(counts), "sampled": sampled,
                            "files": len(run.trajectories) - len(names)}}
        if _size(doc) <= limits.max_bytes or not names:
            return doc
        sizes = [_size(source) for source in sources]
        hopeless = [i for i, n in enumerate(counts) if n == 1 and sizes[i] > limits.max_bytes]
        if hopeless:  # a trajectory that cannot fit even alone goes first, before it thins every other file
            counts[hopeless[0]] = 0
        elif any(counts):  # one trajectory per file kept as long as possible
            pick = [i for i, n in enumerate(counts) if n > 1] or [i for i, n in enumerate(counts) if n]
            counts[max(pick, key=sizes.__getitem__)] //= 2
        else:
            names, counts = names[:-1], counts[:-1]


def embed_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script type="application/json">`` element."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
