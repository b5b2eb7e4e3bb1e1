"""``trace/code_localization-v0``: find (and optionally fix) the one mutated function of a generated package.

Each reset generates a package from a seed (``generator.generate_task``), writes it as a one-task
swebench task repo and runs it on the local backend with the SWE tools. Modes:
``localize`` (default; reward = mean of file F1 and function F1 of ``submit(files, functions)``),
``repair`` (reward = hidden tests resolved) and ``localize+verify`` (reward = resolved, F1 in ``info``).
Splits are disjoint by construction: generator seed ``2k`` for ``train`` and ``2k + 1`` for ``test``.
The generated task directory is deleted as soon as it is loaded and its tree pinned in the episode's
own pristine store: the gold patch and hidden tests exist only in this process.
"""

from __future__ import annotations

import shutil
from typing import Any

from trace_envs.core.parsing import format_tool_call
from trace_envs.core.tool_env import Episode
from trace_envs.swe.backends import LocalBackend
from trace_envs.swe.codeloc.generator import CodeLocTask, GenConfig, generate_task
from trace_envs.swe.env import SWEBenchEnv, SWEEpisode
from trace_envs.swe.local_tasks import write_task
from trace_envs.swe.store import PristineStore
from trace_envs.swe.task import load_task_repo

SPLITS = {"train": 0, "test": 1}


def generator_seed(task_seed: int, split: str) -> int:
    """Train and test use disjoint generator seeds (even / odd)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {tuple(SPLITS)}, got {split!r}")
    return 2 * int(task_seed) + SPLITS[split]


class CodeLocalizationEnv(SWEBenchEnv):
    """See module docstring. ``options`` at reset: ``task_seed`` pins the task."""

    def __init__(self, split: str = "train", mode: str = "localize", modules_per_layer: int = 3,
                 functions_per_module: int = 3, max_steps: int = 20, max_errors: int = 10,
                 command_timeout_s: float = 20.0, eval_timeout_s: float = 60.0, memory_mb: int = 2048,
                 render_mode: str | None = None):
        super().__init__(dataset="generated", split=split, backend="local", mode=mode, max_steps=max_steps,
                         max_errors=max_errors, command_timeout_s=command_timeout_s, eval_timeout_s=eval_timeout_s,
                         memory_mb=memory_mb, render_mode=render_mode)
        generator_seed(0, split)  # validate the split early
        self.config = GenConfig(modules_per_layer=modules_per_layer, functions_per_module=functions_per_module)
        self.generated: CodeLocTask | None = None
        self._episode_store: PristineStore | None = None

    def _new_episode(self, options: dict[str, Any] | None) -> Episode:
        self._close_episode()
        options = options or {}
        task_seed = int(options["task_seed"]) if "task_seed" in options else int(self.np_random.integers(2**31))
        gen = generate_task(generator_seed(task_seed, self.split), self.config)
        self.generated = gen
        root = self._scratch_dir() / "generated"
        shutil.rmtree(root, ignore_errors=True)
        iid = f"codeloc__{gen.package}-{gen.seed}"
        write_task(root / "tasks" / iid, iid, f"generated/{gen.package}", gen.problem_statement, gen.base_files,
                   gen.fixed_files, gen.hidden_tests, gen.fail_to_pass, gen.pass_to_pass,
                   extra={"gold_files": [gen.gold_file], "gold_functions": [gen.gold_function],
                          "mutation": gen.mutation, "split": self.split})
        task = load_task_repo(root, [iid])[0]
        self._episode_store = PristineStore(self._scratch_dir() / "episode_store")
        self._episode_store.pin(task.repo_path, task.base_commit)
        shutil.rmtree(root)
        return SWEEpisode(task, LocalBackend(self.limits, self.eval_timeout_s, self._episode_store), self.mode)

    def _close_episode(self) -> None:
        super()._close_episode()
        if self._episode_store is not None:  # one generated tree per episode: drop it with the episode
            self._episode_store.close()
            self._episode_store = None

    def oracle_actions(self) -> list[str]:
        """Actions of a perfect agent for the current episode (tests and calibration)."""
        gen = self.generated
        if gen is None:
            raise RuntimeError("call reset() first")
        actions = []
        if self.mode in ("repair", "localize+verify"):
            actions.append(format_tool_call("str_replace_editor", {
                "command": "str_replace", "path": gen.gold_file, "old_str": gen.buggy_source.strip(),
                "new_str": gen.fixed_source.strip()}))
        args = {} if self.mode == "repair" else {"files": [gen.gold_file], "functions": [gen.gold_function]}
        actions.append(format_tool_call("submit", args))
        return actions
