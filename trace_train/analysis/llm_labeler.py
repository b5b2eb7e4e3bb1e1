"""The paper's two LLM phases over any OpenAI-compatible endpoint (§2.2–2.3).

* **discovery** — one request: the compacted trajectories go in, at most ``max_candidates``
  capabilities (name, definition, example trajectory ids) come out;
* **labeling** — N independent runs; each run labels every (trajectory, capability) pair, several
  trajectories per request. Runs differ by the request ``seed`` (and sampling temperature).

Answers are parsed tolerantly. A batch whose answer is garbage or leaves pairs unlabeled is asked
again (only for the trajectories still incomplete, at most ``label_retries`` times); pairs still
unlabeled after that are recorded as *missing* in the run, never counted as NA.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from trace_train.analysis.jsonparse import parse_json_loose
from trace_train.analysis.labels import Capability, Label, LabelRun
from trace_train.analysis.llm_client import ChatClient, LLMError
from trace_train.paths import PROMPTS_DIR
from trace_train.trajectory import TrajectoryRecord, compact_text

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


def _parse_labels(value: Any, aliases: set[str], caps: dict[str, str]) -> dict[tuple[str, str], Label]:
    """Collect (alias, capability) -> Label from the answer shapes a model plausibly produces."""
    out: dict[tuple[str, str], Label] = {}

    def put(alias: Any, cap: Any, label: Any) -> None:
        alias, cap_name = str(alias).strip(), caps.get(snake_case(cap))
        parsed = Label.parse(label)
        if alias in aliases and cap_name and parsed is not None:
            out[(alias, cap_name)] = parsed

    if isinstance(value, dict) and "labels" in value:
        value = value["labels"]
    if isinstance(value, dict):
        for alias, per_cap in value.items():
            if isinstance(per_cap, dict):
                for cap, label in per_cap.items():
                    put(alias, cap, label)
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                continue
            alias = next((item[k] for k in _ID_KEYS if k in item), None)
            if alias is None:
                continue
            if "capability" in item and "label" in item:
                put(alias, item["capability"], item["label"])
            elif isinstance(item.get("labels"), dict):
                for cap, label in item["labels"].items():
                    put(alias, cap, label)
    return out


@dataclass
class LLMLabeler:
    client: ChatClient
    batch_size: int = 8
    label_retries: int = 2
    seed: int = 0
    max_tool_chars: int = 300
    discovery_max_chars: int = 60_000

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
        for attempt in range(self.label_retries + 1):
            answer = self.client.complete([{"role": "user", "content": prompt}], seed=self.seed * 1009 + attempt)
            caps = self._parse_candidates(answer, max_candidates)
            if caps:
                return caps
            logger.warning("discovery answer had no usable candidates (attempt %d)", attempt + 1)
        raise LLMError("capability discovery returned no usable candidates")

    @staticmethod
    def _parse_candidates(answer: str, max_candidates: int) -> list[Capability]:
        try:
            value = parse_json_loose(answer)
        except ValueError:
            return []
        items = value.get("candidates", []) if isinstance(value, dict) else value
        caps: dict[str, Capability] = {}
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            name, desc = snake_case(item.get("name", "")), str(item.get("description", "")).strip()
            if name and desc and name not in caps:
                caps[name] = Capability(name, desc)
        return list(caps.values())[:max_candidates]

    # ------------------------------------------------------------------ labeling
    def label(self, records: Sequence[TrajectoryRecord], capabilities: Sequence[Capability],
              n_runs: int) -> list[LabelRun]:
        """Phase 2: ``n_runs`` independent labeling runs over every (trajectory, capability) pair."""
        return [self.label_run(records, capabilities, r) for r in range(n_runs)]

    def label_run(self, records: Sequence[TrajectoryRecord], capabilities: Sequence[Capability],
                  run: int) -> LabelRun:
        caps = {snake_case(c.name): c.name for c in capabilities}
        cap_text = "\n".join(f"- `{c.name}`: {c.description}" for c in capabilities)
        template = load_prompt("capability_labeling")
        result = LabelRun(run=run)
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
                answer = self.client.complete([{"role": "user", "content": prompt}], seed=seed)
                try:
                    parsed = _parse_labels(parse_json_loose(answer), set(todo), caps)
                except ValueError:
                    parsed = {}
                for key, label in parsed.items():
                    got.setdefault(key, label)
                if wanted - set(got):
                    logger.info("run %d batch %d: %d pairs unlabeled after attempt %d",
                                run, start // self.batch_size, len(wanted - set(got)), attempt + 1)
            for (alias, cap), label in got.items():
                result[(batch[alias].episode_id, cap)] = label
            lost = wanted - set(got)
            if lost:
                logger.warning("run %d: %d pairs still unlabeled after %d retries; recorded as missing",
                               run, len(lost), self.label_retries)
                result.mark_missing((batch[a].episode_id, c) for a, c in lost)
        return result


def load_capabilities(path: str | Path) -> list[Capability]:
    """Read a candidate dictionary (``{"candidates": [{name, description}]}`` or a bare list)."""
    value = json.loads(Path(path).read_text(encoding="utf-8"))
    items = value.get("candidates", value) if isinstance(value, dict) else value
    return [Capability(snake_case(i["name"]), str(i["description"])) for i in items]
