"""Emitting an accepted LLM-written env or SWE scenario never replaces another env and never leaves half a task."""

from __future__ import annotations

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401  (registers the built-in envs)
import trace_envs.swe.local_tasks as local_tasks
from tests.synthesis.llm.llm_env_modules import GOOD
from tests.synthesis.llm.test_swe_scenarios import scenario
from trace_envs.swe.task import load_task_repo
from trace_envs.synthesis.llm.emit_llm import emit_llm_env, llm_env_id
from trace_envs.synthesis.llm.swe_emit import emit_swe_scenario, scenario_sha
from trace_envs.synthesis.llm.swe_scenario import check_scenario


def test_a_capability_named_like_a_built_in_env_gets_its_own_id(tmp_path):
    built_in = "trace/code_localization-v0"
    entry_point = gym.registry[built_in].entry_point
    assert llm_env_id("code_localization") == "trace/code_localization-llm-v0"
    row = emit_llm_env("code_localization", "retail-sim",
                       GOOD.replace('"transfer_when_stuck"', '"code_localization"'), tmp_path,
                       {"model": "stub", "accepted_attempt": 1})
    try:
        assert row["env_id"] == "trace/code_localization-llm-v0"
        assert gym.registry[built_in].entry_point == entry_point  # untouched
        env = gym.make(row["env_id"])  # the emitted module's Env, behind the proxy of its confined worker
        assert type(env.unwrapped).__name__ == "ConfinedEnv" and env.unwrapped.capability == "code_localization"
        env.close()
        assert llm_env_id("never_registered_cap") == "trace/never_registered_cap-v0"
    finally:
        gym.registry.pop(row["env_id"], None)


def test_a_kill_while_a_scenario_task_is_written_leaves_no_task_that_counts_as_emitted(tmp_path, monkeypatch):
    sc = check_scenario(scenario()).scenario
    real = local_tasks.write_tree

    def killed(root, files):  # dies after the first file of repo/
        real(root, dict(list(files.items())[:1]))
        raise KeyboardInterrupt("killed while writing the task")

    monkeypatch.setattr(local_tasks, "write_tree", killed)
    with pytest.raises(KeyboardInterrupt):
        emit_swe_scenario("cap_x", sc, [], tmp_path, {"model": "stub"})
    task = tmp_path / "swe_scenarios" / "cap_x" / "tasks" / f"llm__cap_x-{scenario_sha(sc)[:12]}"
    assert not task.exists()
    monkeypatch.setattr(local_tasks, "write_tree", real)
    try:
        row = emit_swe_scenario("cap_x", sc, [], tmp_path, {"model": "stub"})
        (loaded,) = load_task_repo(tmp_path / "swe_scenarios" / "cap_x")
        assert loaded.instance_id == task.name and len(row["scenarios"]) == 1
        assert (task / "task.yaml").is_file() and (task / "eval.sh").is_file()
    finally:
        gym.registry.pop("trace/cap_x-swe-v0", None)
