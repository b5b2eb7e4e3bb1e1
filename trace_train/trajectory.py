"""The trajectory record: the common currency of rollout, analysis, training, evaluation and report.

One record per episode, stored as one JSON line. Files are written atomically (temp file + rename);
the reader survives a truncated last line (a crash mid-append) and reports it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.atomic_io import write_text_atomic  # re-exported: one place for atomic writes

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


@dataclass
class TurnTokens:
    """Token-level record of one policy turn, as produced by our rollout backends.

    ``prompt_ids`` are the ids the model was conditioned on for this turn, ``completion_ids`` the
    ids it sampled, ``logprobs`` the sampler's log-probability of each completion id.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]


@dataclass
class TrajectoryRecord:
    """One episode of one policy on one env seed."""

    env_id: str
    seed: int
    messages: list[dict[str, Any]]
    reward: float
    success: bool
    termination: str
    policy: str = "unknown"
    reward_breakdown: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    # Token-level data (our backends only): the full sequence ids, the loss mask (1 only on
    # tokens the policy sampled) and sampler log-probs aligned with ``token_ids`` (0.0 where masked).
    token_ids: list[int] | None = None
    loss_mask: list[int] | None = None
    logprobs: list[float] | None = None
    episode_id: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not self.episode_id:
            self.episode_id = f"{self.env_id}|{self.seed}|{self.policy}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrajectoryRecord:
        version = data.get("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise ValueError(f"trajectory schema {version} is newer than this trace-rl ({SCHEMA_VERSION})")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSONL to ``path`` atomically."""
    return write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """Write one JSON document atomically."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str))


def append_jsonl(path: str | os.PathLike, row: dict[str, Any]) -> None:
    """Append one line (for streaming writers); a crash can only truncate the last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fh.flush()


@dataclass
class ReadReport:
    rows: int = 0
    truncated_last_line: bool = False
    bad_lines: list[int] = field(default_factory=list)


def iter_jsonl(path: str | os.PathLike, report: ReadReport | None = None) -> Iterator[dict[str, Any]]:
    """Yield JSON objects; a broken *last* line is reported and skipped, a broken inner line raises."""
    report = report if report is not None else ReadReport()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                report.truncated_last_line = True
                logger.warning("%s: last line %d is truncated (crash mid-write?); skipped", path, number)
                continue
            raise ValueError(f"{path}:{number}: not valid JSON ({exc})") from exc
        report.rows += 1
        yield row


def drop_rows_from(path: str | os.PathLike, key: str, start: int) -> None:
    """Forget the logged rows whose ``key`` is >= ``start``: a run resumed from a checkpoint replays them."""
    if Path(path).exists():
        write_jsonl_atomic(path, [row for row in iter_jsonl(path) if int(row.get(key, -1)) < start])


def write_trajectories(path: str | os.PathLike, records: Iterable[TrajectoryRecord]) -> Path:
    return write_jsonl_atomic(path, (r.to_dict() for r in records))


def read_trajectories(path: str | os.PathLike, report: ReadReport | None = None) -> list[TrajectoryRecord]:
    return [TrajectoryRecord.from_dict(row) for row in iter_jsonl(path, report)]


def compact_text(record: TrajectoryRecord, max_tool_chars: int = 300) -> str:
    """The compact text form the analysis step reads: one line per message, tool output clipped."""
    head = (
        f"[trajectory {record.episode_id}] env={record.env_id} seed={record.seed} "
        f"reward={record.reward:.2f} success={record.success} end={record.termination}"
    )
    lines = [head]
    for msg in record.messages:
        role = msg.get("role", "?")
        content = msg.get("content") or ""
        if role == "tool" and len(content) > max_tool_chars:
            content = content[:max_tool_chars] + " …"
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            content += f" <call {fn.get('name')}({fn.get('arguments')})>"
        lines.append(f"{role}: {content.strip()}")
    return "\n".join(lines)
