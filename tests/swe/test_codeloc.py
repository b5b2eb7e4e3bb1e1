"""Code-localization env: oracle scores 1.0, rewards discriminate, splits disjoint, bad mutants rejected."""

from __future__ import annotations

import pytest

from trace_envs.core.parsing import format_tool_call
from trace_envs.swe.codeloc import generator as gen_mod
from trace_envs.swe.codeloc.env import CodeLocalizationEnv, generator_seed
from trace_envs.swe.codeloc.generator import generate_task, mutants


def _play(env, actions):
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
    return reward, terminated, info


@pytest.mark.parametrize("mode", ["localize", "repair", "localize+verify"])
def test_oracle_scores_one(mode):
    env = CodeLocalizationEnv(mode=mode)
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            reward, terminated, info = _play(env, env.oracle_actions())
            assert terminated and reward == 1.0 and info["success"]
            if mode != "localize":
                assert info["eval"]["resolution"] == "RESOLVED_FULL"
    finally:
        env.close()


def test_wrong_answers_score_less():
    env = CodeLocalizationEnv(mode="localize")
    try:
        env.reset(seed=3)
        gold = env.generated
        other = next(p for p in gold.base_files if p.endswith(".py") and p != gold.gold_file and "__init__" not in p)
        reward, _, info = _play(env, [format_tool_call("submit", {"files": [other], "functions": [f"{other}::x"]})])
        assert reward == 0.0
        env.reset(seed=3)
        right_file_wrong_fn = {"files": [gold.gold_file], "functions": [f"{gold.gold_file}::not_it"]}
        reward, _, info = _play(env, [format_tool_call("submit", right_file_wrong_fn)])
        assert reward == 0.5 and info["localization"]["file_f1"] == 1.0
        env.reset(seed=3)
        bare_name = gold.gold_function.split("::")[1]
        reward, _, _ = _play(env, [format_tool_call("submit", {"files": [gold.gold_file], "functions": [bare_name]})])
        assert reward == 1.0
    finally:
        env.close()


def test_repair_without_fix_fails_hidden_tests():
    env = CodeLocalizationEnv(mode="repair")
    try:
        env.reset(seed=2)
        reward, terminated, info = _play(env, [format_tool_call("submit", {})])
        assert terminated and reward == 0.0
        assert sorted(info["eval"]["tests_status"]["FAIL_TO_PASS"]["failure"]) == sorted(env.generated.fail_to_pass)
        assert info["eval"]["p2p_rate"] == 1.0  # the in-memory validation agrees with real pytest
    finally:
        env.close()


def test_splits_are_disjoint():
    train = {generator_seed(k, "train") for k in range(500)}
    test = {generator_seed(k, "test") for k in range(500)}
    assert not train & test
    train_tasks = {generate_task(generator_seed(k, "train")).base_files[generate_task(
        generator_seed(k, "train")).gold_file] for k in range(10)}
    test_tasks = {generate_task(generator_seed(k, "test")).base_files[generate_task(
        generator_seed(k, "test")).gold_file] for k in range(10)}
    assert not train_tasks & test_tasks
    with pytest.raises(ValueError):
        CodeLocalizationEnv(split="validation")


def test_generated_tasks_are_valid_and_varied():
    tasks = [generate_task(s) for s in range(25)]
    for t in tasks:
        assert t.fail_to_pass and t.pass_to_pass
        assert t.buggy_source.strip() in t.base_files[t.gold_file]
        assert t.fixed_source.strip() in t.fixed_files[t.gold_file]
        assert len(t.base_files) >= 10 and t.meta["n_functions"] >= 20
    assert len({t.mutation for t in tasks}) >= 3
    assert len({t.meta["gold_layer"] for t in tasks}) == 2
    assert generate_task(7).base_files == generate_task(7).base_files


def test_mutants_that_break_no_test_are_rejected(monkeypatch):
    real = mutants
    offered = []

    def with_equivalent_first(source):
        name = source.split("(")[0].split()[-1]
        equivalent = source.replace(f"def {name}(", f"def {name}(", 1).rstrip() + "\n    pass\n"
        offered.append(name)
        return [("equivalent", equivalent)] + real(source)

    monkeypatch.setattr(gen_mod, "mutants", with_equivalent_first)
    monkeypatch.setattr(gen_mod.random.Random, "shuffle", lambda self, seq: None)  # keep the equivalent first
    task = gen_mod.generate_task(11)
    assert offered and task.mutation != "equivalent"
