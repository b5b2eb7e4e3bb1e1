"""The paper's two LLM phases over any OpenAI-compatible endpoint (§2.2–2.3).

* **discovery** — one request: the compacted trajectories go in, at most ``max_candidates``
  capabilities (name, definition, example trajectory ids) come out;
* **labeling** — N independent runs; each run labels every (trajectory, capability) pair, several
  trajectories per request. Runs differ by the request ``seed`` (and sampling temperature).

Answers are parsed tolerantly. A batch whose answer is garbage or leaves pairs unlabeled is asked
again (only for the trajectories still incomplete, at most ``label_retries`` times); pairs still
unlabeled after that are recorded as *missing* in the run, never counted as NA. Only answers that
yield at least one usable label (or candidate) are cached. A run that labels less than
``min_labeled_fraction`` of its pairs raises :class:`LabelCoverageError` with the counts and why.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from trace_envs.records import TrajectoryRecord, compact_text
from trace_train.analysis.jsonparse import json_candidates
from trace_train.analysis.labels import Capability, Label, LabelRun
from trace_train.analysis.llm_client import ChatClient, InvalidAnswer, LLMError
from trace_train.paths import PROMPTS_DIR

logger = logging.getLogger(__name__)

_ID_KEYS = ("id", "trajectory", "trajectory_id", "task_id", "episode_id")


def snake_case(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(name).strip().lower()).strip("_")


def load_prompt(name: str) -> Template:
    return Template((PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8"))


def trajectory_block(alias: str, record: TrajectoryRecord, max_tool_chars: int = 300) -> str:
    """One trajectory as the analysis LLM sees it: alias, outcome, failing reward parts, messages."""
    failing = {k: v for k, v in record.reward_breakdown.items() if isinstance(v, (int, float)) and v < 1}
    lines = [f"### {alias} (success={record.success}, reward={record.reward:.2f})"]
    if failing:
        lines.append("failing reward components: " + ", ".join(f"{k}={v:g}" for k, v in sorted(failing.items())))
    lines.append(compact_text(record, max_tool_chars=max_tool_chars))
    return "\n".join(lines)


@dataclass
class Rejects:
    """What an answer held that could not become a label, by kind, with counts per value."""

    ids: Counter = field(default_factory=Counter)
    capabilities: Counter = field(default_factory=Counter)
    labels: Counter = field(default_factory=Counter)
    entries: int = 0  # list items / values of a shape that carries no label

    def update(self, other: Rejects) -> None:
        self.ids.update(other.ids)
        self.capabilities.update(other.capabilities)
        self.labels.update(other.labels)
        self.entries += other.entries

    def summary(self) -> str:
        parts = [f"{kind} x{sum(c.values())} (e.g. {', '.join(repr(v) for v, _ in c.most_common(3))})"
                 for kind, c in (("invalid label values", self.labels), ("unknown capabilities", self.capabilities),
                                 ("unknown trajectory ids", self.ids)) if c]
        if self.entries:
            parts.append(f"entries of an unknown shape x{self.entries}")
        return "; ".join(parts) or "no label entries in a known shape"


def _parse_labels(value: Any, aliases: set[str], caps: dict[str, str],
                  rejects: Rejects | None = None) -> dict[tuple[str, str], Label]:
    """Collect (alias, capability) -> Label from the answer shapes a model plausibly produces."""
    out: dict[tuple[str, str], Label] = {}
    rejects = rejects if rejects is not None else Rejects()

    def put(alias: Any, cap: Any, label: Any) -> None:
        alias, cap_name = str(alias).strip(), caps.get(snake_case(cap))
        parsed = Label.parse(label)
        if alias not in aliases:
            rejects.ids[alias[:40]] += 1
        elif not cap_name:
            rejects.capabilities[str(cap)[:40]] += 1
        elif parsed is None:
            rejects.labels[str(label)[:40]] += 1
        else:
            out[(alias, cap_name)] = parsed

    if isinstance(value, dict) and "labels" in value:
        value = value["labels"]
    if isinstance(value, dict):
        for alias, per_cap in value.items():
            if isinstance(per_cap, dict):
                for cap, label in per_cap.items():
                    put(alias, cap, label)
            else:
                rejects.entries += 1
    elif isinstance(value, list):
        for item in value:
            alias = next((item[k] for k in _ID_KEYS if k in item), None) if isinstance(item, dict) else None
            if alias is None:
                rejects.entries += 1
            elif "capability" in item and "label" in item:
                put(alias, item["capability"], item["label"])
            elif isinstance(item.get("labels"), dict):
                for cap, label in item["labels"].items():
                    put(alias, cap, label)
            else:
                rejects.entries += 1
    else:
        rejects.entries += 1
    return out


class LabelCoverageError(LLMError):
    """A labeling run labelled less than the configured fraction of its (trajectory, capability) pairs."""

    def __init__(self, message: str, url: str, run: int, labelled: int, total: int, minimum: float,
                 why: str, partial: LabelRun) -> None:
        super().__init__(message, url)
        self.run, self.labelled, self.total, self.minimum = run, labelled, total, minimum
        self.unlabelled = total - labelled
        self.why = why
        self.partial = partial  # the labels the run did get


@dataclass
class _RunStats:
    """Why pairs of one run went unlabeled: per answer outcome, and the rejected entries."""

    answers: int = 0
    no_json: int = 0
    no_usable: int = 0
    partial: int = 0
    rejects: Rejects = field(default_factory=Rejects)

    def why(self) -> str:
        text = (f"{self.answers} answers: {self.no_json} without JSON, {self.no_usable} with no usable label, "
                f"{self.partial} leaving pairs out")
        return text + (f"; rejected entries: {self.rejects.summary()}" if self.no_json < self.answers else "")


@dataclass
class LLMLabeler:
    client: ChatClient
    batch_size: int = 8
    label_retries: int = 2
    seed: int = 0
    max_tool_chars: int = 300
    discovery_max_chars: int = 60_000
    min_labeled_fraction: float = 0.9  # a run labelling fewer of its pairs raises LabelCoverageError

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_labeled_fraction <= 1.0:
            raise ValueError(f"min_labeled_fraction must be in [0, 1], got {self.min_labeled_fraction!r}")

    # ------------------------------------------------------------------ discovery
    def discover(self, records: Sequence[TrajectoryRecord], max_candidates: int = 10) -> list[Capability]:
        """Phase 1: propose at most ``max_candidates`` capabilities from the compacted trajectories."""
        aliases = {f"t{i + 1}": r for i, r in enumerate(records)}
        # failures first, then successes, interleaved so both sides appear under the budget
        failed = [a for a, r in aliases.items() if not r.success]
        passed = [a for a, r in aliases.items() if r.success]
        order = [a for pair in zip(failed, passed) for a in pair]
        order += failed[len(passed):] + passed[len(failed):]
        blocks, used = [], 0
        for alias in order:
            block = trajectory_block(alias, aliases[alias], self.max_tool_chars)
            if used + len(block) > self.discovery_max_chars and blocks:
                break
            blocks.append(block)
            used += len(block)
        if len(blocks) < len(order):
            logger.warning("discovery prompt holds %d of %d trajectories (budget %d chars)",
                           len(blocks), len(order), self.discovery_max_chars)
        prompt = load_prompt("capability_discovery").substitute(
            max_candidates=max_candidates, trajectories="\n\n".join(blocks))
        def parse(answer: str) -> list[Capability]:
            caps = self._parse_candidates(answer, max_candidates)
            if not caps:
                raise ValueError("no usable candidates")
            return caps

        last = ""
        for attempt in range(self.label_retries + 1):
            try:
                return self.client.ask([{"role": "user", "content": prompt}], parse, seed=self.seed * 1009 + attempt)
            except InvalidAnswer as exc:
                last = f"{exc.content[:200]!r}"
                logger.warning("discovery answer had no usable candidates (attempt %d): %s", attempt + 1, last)
        raise LLMError(f"capability discovery at {self.client.endpoint} (model {self.client.model}) returned no "
                       f"usable candidates in {self.label_retries + 1} answers; last answer: {last} "
                       f"[{self.client.cache_note()}]", self.client.endpoint)

    @staticmethod
    def _parse_candidates(answer: str, max_candidates: int) -> list[Capability]:
        for value in json_candidates(answer):  # the first JSON value that holds candidates (not a quoted call)
            items = value.get("candidates", []) if isinstance(value, dict) else value
            caps: dict[str, Capability] = {}
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, dict):
                    continue
                name, desc = snake_case(item.get("name", "")), str(item.get("description", "")).strip()
                if name and desc and name not in caps:
                    caps[name] = Capability(name, desc)
            if caps:
                return list(caps.values())[:max_candidates]
        return []

    # ------------------------------------------------------------------ labeling
    def label(self, records: Sequence[TrajectoryRecord], capabilities: Sequence[Capability],
              n_runs: int) -> list[LabelRun]:
        """Phase 2: ``n_runs`` independent labeling runs over every (trajectory, capability) pair."""
        return [self.label_run(records, capabilities, r) for r in range(n_runs)]

    def label_run(self, records: Sequence[TrajectoryRecord], capabilities: Sequence[Capability],
                  run: int) -> LabelRun:
        """One labeling run; raises :class:`LabelCoverageError` when it labels too few pairs."""
        caps = {snake_case(c.name): c.name for c in capabilities}
        cap_text = "\n".join(f"- `{c.name}`: {c.description}" for c in capabilities)
        template = load_prompt("capability_labeling")
        result = LabelRun(run=run)
        stats = _RunStats()
        for start in range(0, len(records), self.batch_size):
            batch = {f"t{start + i + 1}": r for i, r in enumerate(records[start:start + self.batch_size])}
            wanted = {(a, c.name) for a in batch for c in capabilities}
            got: dict[tuple[str, str], Label] = {}
            for attempt in range(self.label_retries + 1):
                todo = sorted({a for a, _ in wanted - set(got)}, key=lambda a: int(a[1:]))
                if not todo:
                    break
                prompt = template.substitute(
                    capabilities=cap_text,
                    trajectories="\n\n".join(trajectory_block(a, batch[a], self.max_tool_chars) for a in todo),
                )
                seed = (self.seed * 1_000_003 + run) * 101 + attempt
                stats.answers += 1
                try:
                    parsed = self.client.ask([{"role": "user", "content": prompt}],
                                             _batch_parser(set(todo), caps, stats), seed=seed)
                except InvalidAnswer as exc:
                    logger.info("run %d batch %d attempt %d: %s", run, start // self.batch_size, attempt + 1, exc)
                    parsed = {}
                for key, label in parsed.items():
                    got.setdefault(key, label)
                if wanted - set(got):
                    stats.partial += bool(parsed)
                    logger.info("run %d batch %d: %d pairs unlabeled after attempt %d",
                                run, start // self.batch_size, len(wanted - set(got)), attempt + 1)
            for (alias, cap), label in got.items():
                result[(batch[alias].episode_id, cap)] = label
            lost = wanted - set(got)
            if lost:
                logger.warning("run %d: %d pairs still unlabeled after %d retries; recorded as missing",
                               run, len(lost), self.label_retries)
                result.mark_missing((batch[a].episode_id, c) for a, c in lost)
        self._check_coverage(result, len(records) * len(capabilities), stats)
        return result

    def _check_coverage(self, result: LabelRun, total: int, stats: _RunStats) -> None:
        labelled = len(result)
        if not total or labelled >= self.min_labeled_fraction * total - 1e-9:
            return
        why = stats.why()
        c = self.client
        raise LabelCoverageError(
            f"labeling run {result.run}: {labelled} of {total} (trajectory, capability) pairs labelled "
            f"({labelled / total:.0%}, minimum min_labeled_fraction={self.min_labeled_fraction:.0%}); "
            f"{total - labelled} unlabelled. Why: {why}. Endpoint {c.endpoint}, model {c.model}; "
            f"{c.requests_made} requests, {c.cache_note()}.",
            c.endpoint, result.run, labelled, total, self.min_labeled_fraction, why, result)


def _batch_parser(todo: set[str], caps: dict[str, str], stats: _RunStats):
    """The validator of one labeling answer: its labels, or ``ValueError`` when it has none (not cached)."""

    def parse(answer: str) -> dict[tuple[str, str], Label]:
        first: Rejects | None = None  # what the answer's first JSON value held that was no label
        for value in json_candidates(answer):  # the first JSON value with a label: not a quoted call or example
            rejects = Rejects()
            labels = _parse_labels(value, todo, caps, rejects)
            if labels:
                stats.rejects.update(rejects)
                return labels
            first = first or rejects
        if first is None:
            stats.no_json += 1
            raise ValueError("no JSON in the answer")
        stats.rejects.update(first)
        stats.no_usable += 1
        raise ValueError(f"no usable label: {first.summary()}")

    return parse


def load_capabilities(path: str | Path) -> list[Capability]:
    """Read a candidate dictionary (``{"candidates": [{name, description}]}`` or a bare list).

    Names are snake_cased; a file that cannot be read as that shape, an entry without a string name and description,
    a name that snake_cases to nothing, or two names equal after snake_case raise ``ValueError`` naming the file
    and the entry."""
    path = Path(path)
    shape = 'give {"candidates": [{"name": ..., "description": ...}, ...]} or a bare list of such entries'
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"capabilities file {path}: cannot read it as JSON ({exc}); {shape}") from exc
    items = value.get("candidates", value) if isinstance(value, dict) else value
    if not isinstance(items, list) or not items:
        raise ValueError(f"capabilities file {path}: holds no list of capabilities; {shape}")
    caps: list[Capability] = []
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        where = f"capabilities file {path}, entry {index}"
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("name", "description")):
            raise ValueError(f"{where}: needs a string name and a string description, got {str(item)[:100]!r}")
        name = snake_case(item["name"])
        if not name:
            raise ValueError(f"{where}: name {item['name']!r} is empty in snake_case (which keeps a-z and 0-9)")
        if name in first:
            raise ValueError(f"{where}: name {item['name']!r} is {name!r} in snake_case, as is entry {first[name]}'s; "
                             "capability names must differ")
        first[name] = index
        caps.append(Capability(name, item["description"]))
    return caps
