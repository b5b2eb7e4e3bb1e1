"""SWE tasks (swebench instance schema) and their sources: HF datasets, JSON/JSONL files, task repos.

A task repo is swebench 5's on-disk layout (``sweb.yaml`` + ``tasks/<instance_id>/{task.yaml,
tests.json, problem_statement.md, gold.patch, test.patch, eval.sh, Dockerfile}``). Our local tasks
add ``tasks/<instance_id>/repo/``: the base source tree (the Dockerfile's build context ``COPY``s it
to ``/testbed``), which the local backend checks out.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trace_envs.records import split_jsonl_lines
from trace_envs.swe.patches import DEFAULT_TEST_CMD

log = logging.getLogger(__name__)

HF_ALIASES = {
    "verified": "SWE-bench/SWE-bench_Verified",
    "lite": "SWE-bench/SWE-bench_Lite",
    "full": "SWE-bench/SWE-bench",
    "multilingual": "SWE-bench/SWE-bench_Multilingual",
}


def _test_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = json.loads(value)
    return [str(v) for v in value]


@dataclass
class SWETask:
    """One SWE-bench-style instance plus where its base source tree lives (local backend)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str = ""
    test_patch: str = ""
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    version: str = ""
    hints_text: str = ""
    image: str = ""
    eval_script: str = ""
    log_parser: str = "parse_log_pytest"
    eval_type: str = "pass_and_fail"
    repo_path: Path | None = None
    test_cmd: str = DEFAULT_TEST_CMD
    row: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any], repo_path: Path | None = None) -> "SWETask":
        """Build from a swebench dataset row (FAIL_TO_PASS/PASS_TO_PASS as lists or JSON strings)."""
        missing = [k for k in ("instance_id", "repo", "base_commit", "problem_statement") if k not in row]
        if missing:
            raise ValueError(f"instance row lacks {', '.join(missing)}")
        path = repo_path or (Path(row["repo_path"]) if row.get("repo_path") else None)
        return cls(
            instance_id=str(row["instance_id"]), repo=str(row["repo"]), base_commit=str(row["base_commit"]),
            problem_statement=str(row["problem_statement"]), patch=str(row.get("patch") or ""),
            test_patch=str(row.get("test_patch") or ""), fail_to_pass=_test_list(row.get("FAIL_TO_PASS")),
            pass_to_pass=_test_list(row.get("PASS_TO_PASS")), version=str(row.get("version") or ""),
            hints_text=str(row.get("hints_text") or ""), image=str(row.get("image") or ""),
            eval_script=str(row.get("eval_script") or ""), log_parser=str(row.get("log_parser") or "parse_log_pytest"),
            eval_type=str(row.get("eval_type") or "pass_and_fail"), repo_path=path,
            test_cmd=str(row.get("test_cmd") or DEFAULT_TEST_CMD), row=dict(row),
        )

    def to_row(self) -> dict[str, Any]:
        """The swebench instance dict (F2P/P2P as JSON strings, like the HF datasets)."""
        row = dict(self.row)
        row.update(
            instance_id=self.instance_id, repo=self.repo, base_commit=self.base_commit,
            problem_statement=self.problem_statement, patch=self.patch, test_patch=self.test_patch,
            FAIL_TO_PASS=json.dumps(self.fail_to_pass), PASS_TO_PASS=json.dumps(self.pass_to_pass),
            version=self.version, hints_text=self.hints_text, image=self.image, eval_script=self.eval_script,
            log_parser=self.log_parser, eval_type=self.eval_type,
        )
        row.pop("repo_path", None)
        return row


def load_jsonl(path: str | Path, repos_dir: str | Path | None = None) -> list[SWETask]:
    """Instances from a ``.jsonl`` (one row per line) or ``.json`` (a list) file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    rows = json.loads(text) if path.suffix == ".json" else [json.loads(ln) for ln in split_jsonl_lines(text)
                                                             if ln.strip()]
    return [SWETask.from_row(r, _repo_dir_for(r, repos_dir)) for r in rows]


def _repo_dir_for(row: dict[str, Any], repos_dir: str | Path | None) -> Path | None:
    """``<repos_dir>/<owner>__<name>`` when that clone exists (local backend on real instances)."""
    if repos_dir is None:
        return None
    cand = Path(repos_dir) / str(row.get("repo", "")).replace("/", "__")
    return cand if cand.exists() else None


def load_hf(name: str, split: str = "test", repos_dir: str | Path | None = None) -> list[SWETask]:
    """Instances from a Hugging Face dataset (needs ``datasets`` and a reachable hub)."""
    name = HF_ALIASES.get(name.lower(), name)
    try:
        import datasets  # noqa: PLC0415 - optional, heavy
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("loading SWE-bench from the hub needs `pip install trace-rl[swe]` (datasets)") from exc
    try:
        rows = datasets.load_dataset(name, split=split)
    except Exception as exc:  # noqa: BLE001 - datasets raises many network error types
        raise RuntimeError(
            f"could not load {name!r} split {split!r} from the Hugging Face hub ({type(exc).__name__}: {exc}). "
            "Offline, export the instances to a JSONL file or a task repo and pass its path as `dataset`."
        ) from exc
    return [SWETask.from_row(dict(r), _repo_dir_for(r, repos_dir)) for r in rows]


def load_task_repo(path: str | Path, instance_ids: list[str] | None = None) -> list[SWETask]:
    """Instances from a swebench task repo (``tasks/<id>/...``; ``repo/`` = local base tree)."""
    root = Path(path) / "tasks"
    if not root.is_dir():
        raise FileNotFoundError(f"{path} has no tasks/ directory (not a swebench task repo)")
    tasks = []
    # a dot-folder is a task being written (``publish_dir``'s temporary folder, or one a kill left behind)
    for task_dir in sorted(d for d in root.iterdir() if not d.name.startswith(".") and (d / "task.yaml").is_file()):
        if instance_ids is not None and task_dir.name not in instance_ids:
            continue
        row = yaml.safe_load((task_dir / "task.yaml").read_text())
        for column, fname in (("patch", "gold.patch"), ("test_patch", "test.patch"), ("eval_script", "eval.sh"),
                              ("problem_statement", "problem_statement.md"), ("hints_text", "hints.md")):
            fpath = task_dir / fname
            row[column] = fpath.read_text() if fpath.is_file() else ""
        row.update(json.loads((task_dir / "tests.json").read_text()))
        repo_dir = task_dir / "repo"
        tasks.append(SWETask.from_row(row, repo_dir if repo_dir.is_dir() else None))
    return tasks


def load_tasks(dataset: str | Path, split: str = "test", repos_dir: str | Path | None = None) -> list[SWETask]:
    """Dispatch on ``dataset``: a ``.json``/``.jsonl`` file, a task-repo directory, or a HF name."""
    path = Path(dataset)
    if path.suffix in (".json", ".jsonl") and path.is_file():
        return load_jsonl(path, repos_dir)
    if path.is_dir():
        return load_task_repo(path)
    if path.suffix in (".json", ".jsonl"):
        raise FileNotFoundError(f"no such instance file: {path}")
    return load_hf(str(dataset), split, repos_dir)
