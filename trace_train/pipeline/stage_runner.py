"""Content-hashed stages in one run directory: skip what is unchanged, resume what was interrupted.

``pipeline.json`` records each stage's status, the hash of its inputs (its config plus the hashes of
the stages it reads) and its outputs. A stage reruns when its hash changed, when it never finished,
or when forced (``force=<stage>``; ``train`` and ``baselines`` force every ``train/<capability>`` and
``baselines/<name>`` stage). A changed or forced stage starts from an empty folder: its record says
``clearing`` under the new hash before the old folder is deleted, so a deletion cut short is finished by the
next run whatever its inputs. An interrupted stage with unchanged inputs is called again and resumes from what
it left in its folder (checkpoints), so a kill loses at most the iteration in progress. A stage with no record
whose folder holds files (``pipeline.json`` moved aside or lost) never resumes them: the folder is moved to
``set_aside/`` first. Each record keeps ``wall_s`` (the seconds its invocations on the current inputs took) and
``spans`` (their [start, end] Unix times: stages that ran at once in several workers overlap there).

Stages may run at once in several processes (``pipeline.workers``): each writes only its own stage's record,
read-modify-written under a lock on ``pipeline.json.lock``, and takes in the others' records as it does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trace_envs.records import write_json_atomic
from trace_train.pipeline.config import is_forced

logger = logging.getLogger(__name__)


SET_ASIDE = "set_aside"  # where the folder of a stage with no record goes before the stage runs


def content_hash(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (dict key order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def read_state(path: Path) -> dict[str, Any]:
    """``pipeline.json`` as a dict with a ``stages`` dict (``{"stages": {}}`` when absent); a damaged file is a
    ``ValueError`` that names it: nothing is overwritten."""
    if not path.exists():
        return {"stages": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not readable JSON ({exc}); the run's stage records are lost: restore it, or "
                         f"move it aside to redo every stage (each stage's folder is then moved to "
                         f"{SET_ASIDE}/ before it reruns)") from exc
    if not isinstance(state, dict) or not isinstance(state.get("stages"), dict):
        raise ValueError(f"{path} is not a pipeline state (an object with a 'stages' object); restore it, or move "
                         f"it aside to redo every stage (each stage's folder is then moved to {SET_ASIDE}/ before "
                         "it reruns)")
    return state


@dataclass
class StageRunner:
    run_dir: Path
    force: set[str] = field(default_factory=set)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / "pipeline.json"
        self.state: dict[str, Any] = read_state(path)
        self.state.update(self.meta)

    def _commit(self, name: str) -> None:
        """Write stage ``name``'s record into ``pipeline.json`` (whose other records another process may have
        changed since this one read it) and take the file's records in."""
        path = self.run_dir / "pipeline.json"
        with open(self.run_dir / "pipeline.json.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                disk = read_state(path)
                disk.update(self.meta)
                disk["stages"][name] = self.state["stages"][name]
                write_json_atomic(path, disk)
                self.state = disk
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def refresh(self) -> None:
        """Take in the records other processes (pipeline workers) wrote since this one last read or wrote."""
        path = self.run_dir / "pipeline.json"
        if path.exists():
            self.state = {**read_state(path), **self.meta}

    def hash_of(self, name: str) -> str:
        return self.state["stages"].get(name, {}).get("hash", "")

    def outputs_of(self, name: str) -> dict[str, Any]:
        return self.state["stages"].get(name, {}).get("outputs", {})

    def _set_aside(self, name: str, stage_dir: Path) -> None:
        """Move the folder of stage ``name``, which has no record (so no known inputs), to ``set_aside/``."""
        root = self.run_dir / SET_ASIDE
        root.mkdir(exist_ok=True)
        n = 1
        while (target := root / f"{name.replace('/', '__')}.{n}").exists():
            n += 1
        stage_dir.rename(target)
        logger.warning("stage %s: pipeline.json has no record of it, so its folder's contents come from unknown "
                       "inputs; moved them to %s and running the stage from scratch", name, target)

    def run(self, name: str, inputs_hash: str, fn: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        """Run (or skip) stage ``name``; ``fn(stage_dir)`` returns the stage's JSON-serialisable outputs."""
        if name not in self.state["stages"]:
            self.refresh()  # a pipeline worker may have recorded it since this process read pipeline.json
        record = self.state["stages"].get(name)
        if (record and record.get("status") == "done" and record.get("hash") == inputs_hash
                and not is_forced(name, self.force)):
            logger.info("stage %s: unchanged (hash %s), skipped", name, inputs_hash)
            record["last_action"] = "skipped"
            self._commit(name)
            return record["outputs"]
        stage_dir = self.run_dir / name
        forced = is_forced(name, self.force)
        stale = record is not None and (record.get("hash") != inputs_hash or forced
                                        or record.get("status") == "clearing")
        if stale:
            # Whatever the folder holds (checkpoints above all) belongs to other inputs: never resume it. The
            # record says so before anything is deleted, so a kill during the deletion cannot leave a "done"
            # record over a half-deleted folder.
            logger.info("stage %s: %s, rerunning from scratch", name, "forced" if forced else "inputs changed"
                        if record.get("hash") != inputs_hash else "its folder's deletion was cut short")
            self.state["stages"][name] = {"status": "clearing", "hash": inputs_hash}
            self._commit(name)
            if stage_dir.exists():
                shutil.rmtree(stage_dir)
        elif record is None and stage_dir.is_dir() and any(stage_dir.iterdir()):
            self._set_aside(name, stage_dir)
        stage_dir.mkdir(parents=True, exist_ok=True)
        # a resumed stage adds to what its earlier invocations spent on the same inputs; a redone one starts over
        previous_wall = record.get("wall_s", 0.0) if record and not stale else 0.0
        previous_spans = list(record.get("spans", [])) if record and not stale else []
        self.state["stages"][name] = {"status": "running", "hash": inputs_hash, "wall_s": previous_wall,
                                      "spans": previous_spans}
        self._commit(name)
        start, started_at = time.perf_counter(), time.time()
        try:
            outputs = fn(stage_dir)
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.state["stages"][name].update(status=status, error=repr(exc)[:500],
                                              wall_s=previous_wall + time.perf_counter() - start,
                                              spans=previous_spans + [[started_at, time.time()]])
            self._commit(name)
            raise
        self.state["stages"][name] = {"status": "done", "hash": inputs_hash, "outputs": outputs,
                                      "wall_s": previous_wall + time.perf_counter() - start,
                                      "spans": previous_spans + [[started_at, time.time()]], "last_action": "ran"}
        self._commit(name)
        return outputs
