"""The output of a long rollout run, written as it goes: nothing finished is lost when the run fails.

Each finished batch is validated record by record and appended to ``<out>.partial``; the run's settings sit
beside it in ``<out>.partial.json``. At the end the partial file becomes ``out`` (or, with ``if_exists=append``,
is added after ``out``'s current bytes), atomically, and both side files go. A run that stops early (a server
that died, a kill) leaves them behind: the same command with ``resume=true`` and the same settings skips the
episodes already written and plays the rest. A record that fails validation (say a NaN reward from an env) is
rejected on its own: the others are written and :attr:`PartialOutput.rejected` says which failed and why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.atomic_io import write_bytes_atomic
from trace_envs.records import (
    ReadReport,
    RecordError,
    TrajectoryRecord,
    append_jsonl,
    read_trajectories,
    validate_record,
    write_json_atomic,
    write_trajectories,
)

logger = logging.getLogger(__name__)

EpisodeKey = tuple[str, int, int]  # (env id, env seed, sample seed): one request of a run


def episode_key(record: TrajectoryRecord) -> EpisodeKey:
    """The request a record answers (its episode id without the policy, which the settings pin)."""
    return record.env_id, int(record.seed), int(record.info.get("sample_seed", 0))


@dataclass(frozen=True)
class Rejected:
    """A played episode whose record failed validation (it is not written)."""

    episode_id: str
    reason: str


def _normal(settings: Any) -> Any:
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


@dataclass
class PartialOutput:
    """``out`` written batch by batch through ``<out>.partial`` (see module docstring); the caller holds the
    output lock (``trace_envs.records.exclusive_output``) for the whole run."""

    out: Path
    settings: dict[str, Any]
    written: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    _settings_saved: bool = field(default=False, repr=False)

    @property
    def partial(self) -> Path:
        return self.out.with_name(self.out.name + ".partial")

    @property
    def settings_path(self) -> Path:
        return self.out.with_name(self.out.name + ".partial.json")

    def start(self, resume: bool) -> list[TrajectoryRecord]:
        """Begin (or, with ``resume``, continue) the run; returns the records an interrupted run already wrote.

        ``ValueError`` when a partial file exists and ``resume`` is off (it is never silently replaced), or when
        the interrupted run's settings differ from these.
        """
        if not self.partial.exists():
            if resume:
                logger.info("resume=true: %s does not exist; playing every episode", self.partial)
            return []  # the settings are saved with the first record
        if not resume:
            raise ValueError(f"{self.partial} holds the episodes of an interrupted run on out={self.out}; set "
                             f"resume=true to play the rest (same settings), or delete it and {self.settings_path} "
                             f"to start over")
        self._check_settings()
        self._settings_saved = True
        report = ReadReport()
        records = read_trajectories(self.partial, report)
        if report.truncated_last_line:  # cut mid-append: keep the complete records only
            write_trajectories(self.partial, records)
        self.written = len(records)
        logger.info("resume=true: %d episodes already written in %s", len(records), self.partial)
        return records

    def _check_settings(self) -> None:
        try:
            recorded = json.loads(self.settings_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"resume=true: the settings of the interrupted run ({self.settings_path}) cannot be "
                             f"read ({exc}); delete {self.partial} to start over") from None
        now = _normal(self.settings)
        if recorded != now:
            keys = sorted(k for k in {*recorded, *now} if recorded.get(k) != now.get(k))
            diffs = "; ".join(f"{k}: was {recorded.get(k)!r}, now {now.get(k)!r}" for k in keys)
            raise ValueError(f"resume=true: these settings differ from the interrupted run's (in "
                             f"{self.settings_path}): {diffs}; use the same settings, or delete {self.partial} to "
                             f"start over")

    def append(self, records: Iterable[TrajectoryRecord]) -> None:
        """Validate each record and append the valid ones; an invalid one is logged and kept in ``rejected``."""
        for record in records:
            try:
                row = validate_record(record.to_dict(), f"episode {record.episode_id}")
            except RecordError as exc:
                logger.error("not written: %s", exc)
                self.rejected.append(Rejected(record.episode_id, str(exc)))
                continue
            if not self._settings_saved:  # before the partial file exists: a resume can always check them
                write_json_atomic(self.settings_path, _normal(self.settings))
                self._settings_saved = True
            append_jsonl(self.partial, row)
            self.written += 1

    def records(self) -> list[TrajectoryRecord]:
        """Every record written so far (by this run and the one it resumes)."""
        return read_trajectories(self.partial) if self.partial.exists() else []

    def finish(self, append: bool) -> Path:
        """Publish the partial file as ``out`` (``append``: after ``out``'s current bytes), atomically; the side
        files are removed."""
        data = self.partial.read_bytes() if self.partial.exists() else b""
        if append and self.out.exists():
            existing = self.out.read_bytes()
            if existing and not existing.endswith(b"\n"):
                existing += b"\n"
            data = existing + data
        write_bytes_atomic(self.out, data)
        self.partial.unlink(missing_ok=True)
        self.settings_path.unlink(missing_ok=True)
        return self.out
