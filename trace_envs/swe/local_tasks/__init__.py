"""Build the built-in local task set into a swebench task repo (generated at use time from templates).

``build_task_repo(dest)`` writes ``dest/sweb.yaml`` and ``dest/tasks/local__<name>-1/`` per template with
``task.yaml``, ``tests.json``, ``problem_statement.md``, ``gold.patch``, ``test.patch``, ``eval.sh``,
``Dockerfile`` and ``repo/`` (the buggy base tree; the Dockerfile copies it to ``/testbed`` and commits
it with the same fixed identity, so ``base_commit`` matches inside the image too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import yaml

from trace_envs.swe.gitobj import commit_hash, make_patch
from trace_envs.swe.host_git import GIT_IDENTITY
from trace_envs.swe.local_tasks.templates import TEMPLATES, LocalTaskTemplate
from trace_envs.swe.patches import DEFAULT_TEST_CMD, eval_script

DATASET = "trace-rl/local"
DOCKERFILE = """FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git patch \\
    && rm -rf /var/lib/apt/lists/* && pip install --no-cache-dir pytest
COPY repo/ /testbed/
WORKDIR /testbed
ENV {identity}
RUN git init -q -b main && git add -A && git commit -q --no-verify -m base
"""


def image_name(instance_id: str) -> str:
    """swebench's derived image name (``__`` -> ``_1776_``)."""
    return f"swebench/sweb.eval.x86_64.{instance_id}:latest".lower().replace("__", "_1776_")


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def write_task(task_dir: Path, instance_id: str, repo: str, problem_statement: str, base_files: dict[str, str],
               fixed_files: dict[str, str], hidden_tests: dict[str, str], fail_to_pass: Iterable[str],
               pass_to_pass: Iterable[str], extra: dict[str, Any] | None = None,
               test_cmd: str = DEFAULT_TEST_CMD) -> Path:
    """Write one task directory in swebench task-repo layout plus ``repo/``; returns the directory.

    ``test_cmd`` (before the hidden test files) is kept in ``task.yaml`` when it is not the default."""
    task_dir.mkdir(parents=True, exist_ok=True)
    repo_dir = task_dir / "repo"
    write_tree(repo_dir, base_files)
    base_commit = commit_hash(base_files)  # what git gives the tree; materialize() cross-checks it
    gold = make_patch(base_files, fixed_files)
    test_patch = make_patch(base_files, hidden_tests)
    meta = {
        "instance_id": instance_id, "repo": repo, "version": "0.1", "base_commit": base_commit,
        "environment_setup_commit": base_commit, "split": "test", "datasets": [DATASET],
        "image": image_name(instance_id), "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
        "created_at": "2000-01-01T00:00:00Z", **(extra or {}),
    }
    if test_cmd != DEFAULT_TEST_CMD:
        meta["test_cmd"] = test_cmd
    (task_dir / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=True))
    (task_dir / "tests.json").write_text(
        json.dumps({"FAIL_TO_PASS": list(fail_to_pass), "PASS_TO_PASS": list(pass_to_pass)}, indent=2) + "\n")
    (task_dir / "problem_statement.md").write_text(problem_statement.rstrip() + "\n")
    (task_dir / "gold.patch").write_text(gold)
    (task_dir / "test.patch").write_text(test_patch)
    (task_dir / "eval.sh").write_text(eval_script(base_commit, test_patch, test_cmd=test_cmd))
    identity = " ".join(f'{k}="{v}"' for k, v in GIT_IDENTITY.items())
    (task_dir / "Dockerfile").write_text(DOCKERFILE.format(identity=identity))
    return task_dir


def apply_fix(files: dict[str, str], fix: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """The files changed by ``(path, old, new)`` replacements (each ``old`` must occur exactly once)."""
    changed: dict[str, str] = {}
    for path, old, new in fix:
        text = changed.get(path, files[path])
        if text.count(old) != 1:
            raise ValueError(f"fix for {path} must match exactly once: {old!r}")
        changed[path] = text.replace(old, new)
    return changed


def hidden_files(template: LocalTaskTemplate) -> dict[str, str]:
    """Hidden test files; an entry for an existing base file is appended to it."""
    return {p: template.files.get(p, "") + text for p, text in template.hidden_tests.items()}


def build_template(template: LocalTaskTemplate, root: Path) -> Path:
    iid = f"local__{template.name}-1"
    return write_task(root / "tasks" / iid, iid, f"local/{template.name}", template.problem_statement,
                      template.files, apply_fix(template.files, template.fix), hidden_files(template),
                      template.fail_to_pass, template.pass_to_pass)


def write_config(root: Path, datasets: list[str] | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweb.yaml").write_text(yaml.safe_dump({"datasets": datasets or [DATASET], "splits": ["test"]}))


def build_task_repo(dest: str | Path, templates: Iterable[LocalTaskTemplate] = TEMPLATES) -> Path:
    """Generate the local task set into ``dest`` (a swebench task repo); returns ``dest``."""
    root = Path(dest)
    write_config(root)
    for template in templates:
        build_template(template, root)
    return root


__all__ = ["TEMPLATES", "LocalTaskTemplate", "build_task_repo", "write_task", "apply_fix", "image_name"]
