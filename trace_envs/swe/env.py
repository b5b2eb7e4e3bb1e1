"""``trace/swebench-v0``: SWE-bench-style repair episodes over a task source and a backend.

Tools: ``bash`` (one ``bash -c`` per call, cwd = repository root, time-limited), ``str_replace_editor``
and ``submit``. The submission is the diff of the working tree against the base commit after
``git add -A``, with test files dropped; it is graded in a fresh sandbox with the hidden tests
(FAIL_TO_PASS and PASS_TO_PASS). Reward 1 iff resolved (every F2P and P2P test passes); the
per-test breakdown is in ``info["eval"]``, with the refused chunks of the submission in its
``dropped_chunks``; ``info["patch"]`` shows the submission as text (graded are its exact bytes).
With ``mode="localize"`` (or ``"localize+verify"``) ``submit`` takes ``files`` / ``functions`` and the
reward is localization F1 (or the test verdict, with F1 in ``info``). Tasks: ``dataset="local"`` (the
built-in local task set), a JSON/JSONL file, a swebench task repo, or a Hugging Face dataset name.

Every episode works on its own checkout of a pristine copy of the task's tree (``store.py``), and
``info["sandbox"]`` at reset says what confines the agent's commands (``confinement.py``). The
built-in local tasks are generated into a private directory, read into memory and deleted from disk
before any agent command runs: their gold patch and hidden tests exist only in this process.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from trace_envs.core.parsing import ParsedTurn
from trace_envs.core.tool_env import Episode, Score, ToolUseEnv, UserReply
from trace_envs.core.tools import STR_LIST, ToolBox, ToolError, ToolSpec, params
from trace_envs.swe.backends import Backend, LocalBackend, make_backend
from trace_envs.swe.editor import Editor, editor_parameters
from trace_envs.swe.grading import EvalResult, TestsReport
from trace_envs.swe.localization import score_localization
from trace_envs.swe.patches import files_in_patch
from trace_envs.swe.sandbox import DiffError, SandboxLimits, patch_text
from trace_envs.swe.store import PristineStore
from trace_envs.swe.task import SWETask, load_tasks

log = logging.getLogger(__name__)
MODES = ("repair", "localize", "localize+verify")

SYSTEM_PROMPT = """You are a software engineer fixing an issue in a Python repository.
The repository is checked out in your working directory; every `bash` call starts a fresh shell there.
Use paths relative to the repository root. Do not modify test files: hidden tests decide the outcome.
Work step by step: explore the code, reproduce the problem, edit the source, then call `submit`."""

CONTINUE = "Please continue working on the task with the tools; call `submit` when you are done."


def _guard(fn: Any) -> Any:
    """Turn any unexpected exception of a tool into a ``ToolError`` (bad input never escapes ``step``)."""
    def wrapped(**kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the agent
            raise ToolError(f"{type(exc).__name__}: {exc}") from None
    return wrapped


class SWEEpisode(Episode):
    """One task in one backend: tools, opening prompt, scoring on submit."""

    def __init__(self, task: SWETask, backend: Backend, mode: str = "repair", max_predictions: int = 5):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.task, self.backend, self.mode, self.max_predictions = task, backend, mode, max_predictions
        backend.start(task)
        self.editor = Editor(backend)
        self.submission: dict[str, Any] | None = None
        self.system_prompt = SYSTEM_PROMPT
        self.tools = ToolBox.of([self._bash_spec(), self._editor_spec(), self._submit_spec()])
        self.task_info = {"instance_id": task.instance_id, "repo": task.repo, "base_commit": task.base_commit,
                          "backend": backend.name, "mode": mode}

    # -- tools ------------------------------------------------------------------------------------
    def _bash_spec(self) -> ToolSpec:
        def bash(command: str) -> str:
            if not command.strip():
                raise ToolError("empty command")
            res = self.backend.run(command)
            if res.timed_out:
                return (f"The command timed out and was killed (limit {self.backend_timeout():g}s). "
                        f"Output before the kill:\n{res.output}")
            return f"<returncode>{res.returncode}</returncode>\n<output>\n{res.output}</output>"
        return ToolSpec("bash", "Run a bash command in the repository root (fresh shell each call, time-limited).",
                        params({"command": {"type": "string", "description": "The command to run."}}), _guard(bash),
                        mutates=True)

    def backend_timeout(self) -> float:
        return float(getattr(getattr(self.backend, "limits", None), "timeout_s", 0.0))

    def _editor_spec(self) -> ToolSpec:
        return ToolSpec("str_replace_editor", "View, create and edit files: view / create / str_replace / insert / "
                        "undo_edit.", editor_parameters(), _guard(self.editor), mutates=True)

    def _submit_spec(self) -> ToolSpec:
        def submit(files: list[str] | None = None, functions: list[str] | None = None) -> str:
            if self.mode != "repair" and files is None and functions is None:
                raise ToolError("report the location: submit(files=[...], functions=['path::name', ...])")
            self.submission = {"files": list(files or []), "functions": list(functions or [])}
            return "Submitted."
        if self.mode == "repair":
            return ToolSpec("submit", "Submit the current changes to the repository as your fix; ends the episode.",
                            params({}), _guard(submit))
        desc = ("Report where the bug is: the files and the functions ('path/to/file.py::function_name') "
                "responsible (at most %d of each)" % self.max_predictions)
        if self.mode == "localize+verify":
            desc += "; your current changes to the repository are graded as the fix"
        return ToolSpec("submit", desc + ". Ends the episode.",
                        params({}, {"files": STR_LIST, "functions": STR_LIST}), _guard(submit))

    # -- episode ----------------------------------------------------------------------------------
    def opening(self) -> list[dict[str, Any]]:
        ask = {"repair": "Make the minimal change to non-test files that resolves the issue, then call `submit`.",
               "localize": "Find the file(s) and function(s) responsible for the issue and report them with "
                           "`submit(files=[...], functions=[...])`. You do not need to fix it.",
               "localize+verify": "Fix the issue in the source, then report the file(s) and function(s) you "
                                  "changed with `submit(files=[...], functions=[...])`."}[self.mode]
        text = f"<issue>\n{self.task.problem_statement.strip()}\n</issue>\n\n{ask}"
        return [{"role": "user", "content": text}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return UserReply(CONTINUE)

    def gold_locations(self) -> tuple[list[str], list[str]]:
        row = self.task.row
        files = row.get("gold_files") or files_in_patch(self.task.patch)
        return list(files), list(row.get("gold_functions") or [])

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        sub = self.submission or {"files": [], "functions": []}
        info: dict[str, Any] = {"termination_reason": termination}
        loc = None
        if self.mode != "repair":
            gold_files, gold_functions = self.gold_locations()
            loc = score_localization(sub["files"], sub["functions"], gold_files, gold_functions, self.max_predictions)
            info["localization"] = {"file_f1": loc.file_f1, "function_f1": loc.function_f1, "files": loc.files,
                                    "functions": loc.functions}
        breakdown: dict[str, float] = {}
        if loc is not None:
            breakdown = {"file_f1": loc.file_f1, "function_f1": loc.function_f1 if loc.function_f1 is not None else 0.0}
        if self.mode == "localize":
            assert loc is not None
            return Score(reward=loc.reward, success=loc.reward == 1.0, breakdown=breakdown, info=info)
        try:
            patch = self.backend.diff()
        except DiffError as exc:  # the agent broke its own .git: nothing can be submitted
            log.info("SWE %s: graded as an empty submission: %s", self.task.instance_id, exc)
            patch, info["diff_error"] = "", str(exc)
            failed = TestsReport(f2p_failure=list(self.task.fail_to_pass), p2p_failure=list(self.task.pass_to_pass))
            result = EvalResult(self.task.instance_id, False, False, False, failed, {}, error=f"no submission: {exc}")
        else:
            result = self.backend.evaluate(patch)
        info.update(patch=patch_text(patch), eval=result.summary(), resolved=result.resolved)
        breakdown.update(resolved=float(result.resolved), f2p_rate=result.summary()["f2p_rate"],
                         p2p_rate=result.summary()["p2p_rate"])
        return Score(reward=float(result.resolved), success=result.resolved, breakdown=breakdown, info=info)

    def sandbox_info(self) -> dict[str, Any]:
        """What confines the agent (the backend's report), for ``info["sandbox"]``."""
        report = getattr(self.backend, "sandbox_info", None)
        if report is None:
            log.warning("SWE backend %s does not report its confinement", self.backend.name)
            return {"backend": self.backend.name, "unavailable": ["unknown"], "errors": {}}
        return report()

    def close(self) -> None:
        self.backend.close()


def _check_kwargs(command_timeout_s: Any, eval_timeout_s: Any, memory_mb: Any, ro_paths: Any) -> None:
    """One-line ``ValueError`` naming the kwarg for limits that would only fail later (NaN, inf, 0, strings)."""
    for name, value in (("command_timeout_s", command_timeout_s), ("eval_timeout_s", eval_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite positive number of seconds, got {value!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb <= 0:
        raise ValueError(f"memory_mb must be a positive integer (megabytes), got {memory_mb!r}")
    if ro_paths is not None and (not isinstance(ro_paths, (list, tuple))
                                 or not all(isinstance(p, str) and os.path.isabs(p) for p in ro_paths)):
        raise ValueError(f"ro_paths must be a list of absolute paths, got {ro_paths!r}")


class SWEBenchEnv(ToolUseEnv):
    """SWE-bench-style env (see module docstring). ``options`` at reset: ``instance_id`` or ``task_index``.

    ``ro_paths``: extra host directories the local sandbox shows read-only (e.g. a toolchain outside
    ``/usr`` that the task's tests need); everything else of the host stays out of the agent's view.
    """

    def __init__(self, dataset: str = "local", split: str = "test", backend: str = "auto",
                 instance_ids: list[str] | None = None, repos_dir: str | None = None, mode: str = "repair",
                 max_steps: int = 30, max_errors: int = 10, command_timeout_s: float = 30.0,
                 eval_timeout_s: float = 120.0, memory_mb: int = 2048, network: bool = False,
                 autosubmit: bool = True, render_mode: str | None = None, ro_paths: list[str] | None = None):
        super().__init__(max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if backend not in ("auto", "local", "docker"):
            raise ValueError(f"backend must be one of auto, local, docker, got {backend!r}")
        _check_kwargs(command_timeout_s=command_timeout_s, eval_timeout_s=eval_timeout_s, memory_mb=memory_mb,
                      ro_paths=ro_paths)
        self.dataset, self.split, self.backend_kind = dataset, split, backend
        self.instance_ids, self.repos_dir, self.mode, self.autosubmit = instance_ids, repos_dir, mode, autosubmit
        self.limits = SandboxLimits(timeout_s=command_timeout_s, memory_mb=memory_mb, network=network,
                                    ro_paths=tuple(ro_paths or ()))
        self.eval_timeout_s = eval_timeout_s
        self._tasks: list[SWETask] | None = None
        self._scratch: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self._pristine: PristineStore | None = None

    # -- tasks ------------------------------------------------------------------------------------
    def _scratch_dir(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="trace-swe-tasks-"))
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._scratch), True)
        return self._scratch

    def store(self) -> PristineStore:
        """The env's pristine copies of task trees (inside its scratch dir, removed at ``close``)."""
        if self._pristine is None:
            self._pristine = PristineStore(self._scratch_dir() / "store")
        return self._pristine

    def load_tasks(self) -> list[SWETask]:
        if self._tasks is None:
            if self.dataset == "local":
                from trace_envs.swe.local_tasks import build_task_repo  # noqa: PLC0415

                task_dir = build_task_repo(self._scratch_dir() / "local_tasks")
                tasks = load_tasks(task_dir)
                for task in tasks:
                    if task.repo_path is not None:
                        self.store().pin(task.repo_path, task.base_commit or None)
                shutil.rmtree(task_dir)  # gold patches and hidden tests now live in memory only
            else:
                tasks = load_tasks(self.dataset, self.split, self.repos_dir)
            if self.instance_ids is not None:
                wanted = set(self.instance_ids)
                tasks = [t for t in tasks if t.instance_id in wanted]
            if not tasks:
                raise ValueError(f"no tasks in {self.dataset!r} (instance_ids={self.instance_ids})")
            self._tasks = tasks
        return self._tasks

    def _pick(self, options: dict[str, Any] | None) -> SWETask:
        tasks = self.load_tasks()
        options = options or {}
        if "instance_id" in options:
            by_id = {t.instance_id: t for t in tasks}
            if options["instance_id"] not in by_id:
                raise KeyError(f"unknown instance_id {options['instance_id']!r}")
            return by_id[options["instance_id"]]
        if "task_index" in options:
            return tasks[int(options["task_index"]) % len(tasks)]
        return tasks[int(self.np_random.integers(len(tasks)))]

    def _make_backend(self, task: SWETask) -> Backend:
        if self.backend_kind == "auto" and task.repo_path is not None:
            return LocalBackend(self.limits, self.eval_timeout_s, self.store())
        return make_backend(self.backend_kind, self.limits, self.eval_timeout_s, self.store())

    def _new_episode(self, options: dict[str, Any] | None) -> Episode:
        self._close_episode()
        task = self._pick(options)
        return SWEEpisode(task, self._make_backend(task), self.mode)

    # -- protocol overrides -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """As the base class, plus ``info["sandbox"]``: what confines the agent, missing confinements listed."""
        obs, info = super().reset(seed=seed, options=options)
        if self.episode is not None:
            info["sandbox"] = self.episode.sandbox_info()
        return obs, info

    def _respond(self, turn: ParsedTurn) -> tuple[list[dict[str, Any]], str | None]:
        obs, termination = super()._respond(turn)
        episode = self._episode
        if termination is None and isinstance(episode, SWEEpisode) and episode.submission is not None:
            termination = "submitted"
        return obs, termination

    def _final_info(self, termination: str, terminated: bool) -> dict[str, Any]:
        """As the base class, but a step-limit truncation is still graded (autosubmission)."""
        if terminated or not self.autosubmit or termination != "max_steps":
            return super()._final_info(termination, terminated)
        info = super()._final_info(termination, True)
        info["autosubmitted"] = True
        return info

    def _close_episode(self) -> None:
        if isinstance(self._episode, SWEEpisode):
            self._episode.close()

    @property
    def episode(self) -> SWEEpisode | None:
        return self._episode if isinstance(self._episode, SWEEpisode) else None

    def close(self) -> None:
        self._close_episode()
        if self._pristine is not None:
            self._pristine.close()
            self._pristine = None
        if self._finalizer is not None:
            self._finalizer()
            self._scratch, self._finalizer = None, None
            if self.dataset == "local":
                self._tasks = None  # their source trees lived in the removed scratch dir
        super().close()
