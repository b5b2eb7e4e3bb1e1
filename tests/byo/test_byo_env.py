"""Bring your own env: one resolver for every command, the calculator example through
rollout -> analyze -> train -> eval, scripted policies refusing an env without their annotation,
and async vector envs over the message spaces."""

import json

import gymnasium as gym
import pytest
import torch

import trace_envs  # noqa: F401
from tests.cli_runner import run_cli
from trace_envs.env_refs import register_run_dir, resolve_env_ids

torch.set_num_threads(1)
CALC = "trace_envs.examples.calculator:my/calc-v0"
MODEL = "checkpoints/retail-sim-tiny"


def test_resolver_accepts_module_ids_imports_and_run_dirs(tmp_path):
    assert resolve_env_ids([CALC]) == [CALC] and "my/calc-v0" in gym.registry
    with pytest.raises(ValueError, match="cannot import module 'no_such_mod'"):
        resolve_env_ids(["no_such_mod:x/y-v0"])
    with pytest.raises(ValueError, match="unknown env id 'my/cal-v0'.*did you mean"):
        resolve_env_ids(["my/cal-v0"])
    with pytest.raises(ValueError, match="imports=\\[nope_mod\\]"):
        resolve_env_ids(["trace/retail-sim-v0"], imports=["nope_mod"])
    run = tmp_path / "run"
    (run / "synthesis").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no synthesis/manifest.json"):
        register_run_dir(run)
    (run / "synthesis" / "byo_calc.py").write_text(
        "from trace_envs.registry import register_env\n"
        "ENV_ID = register_env('byo_calc-test', 'trace_envs.examples.calculator:CalculatorEnv', max_value=5)\n")
    (run / "synthesis" / "manifest.json").write_text(json.dumps(
        {"envs": [{"env_id": "trace/byo_calc-test-v0", "module": "byo_calc.py"}]}))
    with pytest.raises(ValueError, match="unknown env id 'trace/byo_calc-test-v0'"):
        resolve_env_ids(["trace/byo_calc-test-v0"])  # a new process does not know the run's envs ...
    assert resolve_env_ids(["trace/byo_calc-test-v0"], run_dirs=[run])  # ... until run_dir= registers them
    assert gym.make("trace/byo_calc-test-v0").unwrapped.max_value == 5


def test_oracle_refuses_an_env_without_a_task_annotation(tmp_path, capsys):
    code, _, err = run_cli("rollout", f"env={CALC}", "policy=oracle", "episodes=2",
                           f"out={tmp_path / 't.jsonl'}", hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 2
    assert "policy oracle (kind oracle) cannot play" in err and "lacks ['identity'" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "t.jsonl").exists()


def test_eval_rejects_an_unknown_env_before_loading_any_model(tmp_path, capsys):
    code, _, err = run_cli("eval", "env=trace/structured_data_reasoning-retail-sim-v0",
                           "policies.base.model=/no/such/model", "episodes=2",
                           hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 2 and "unknown env id 'trace/structured_data_reasoning-retail-sim-v0'" in err
    assert "run_dir=" in err  # says how to register a run's synthesized envs


def test_async_vector_env_works_out_of_the_box():
    kwargs = {"num_envs": 3}
    asy = gym.make_vec("trace/retail-sim-v0", vectorization_mode="async", **kwargs)
    syn = gym.make_vec("trace/retail-sim-v0", vectorization_mode="sync", **kwargs)
    try:
        obs_a, _ = asy.reset(seed=7)
        obs_s, _ = syn.reset(seed=7)
        assert isinstance(obs_a, tuple) and obs_a == obs_s and obs_a[0][0]["role"] == "user"
        action = ('<tool_call>{"name": "get_user_details", "arguments": {"user_id": "x"}}</tool_call>',) * 3
        step_a, step_s = asy.step(action), syn.step(action)
        assert step_a[0] == step_s[0] and step_a[0][1][0]["role"] == "tool"
        assert list(step_a[1]) == list(step_s[1])
    finally:
        asy.close()
        syn.close()


def test_shared_memory_slot_overflow_says_what_to_do():
    from trace_envs.core import MessageList
    from trace_envs.core.space_memory import _create, _read, _write

    space = MessageList(max_bytes=64)
    buf = _create(space, n=2)
    _write(space, 1, [{"role": "user", "content": "é" * 5}], buf)
    assert _read(space, buf, n=2)[1] == [{"role": "user", "content": "é" * 5}] and _read(space, buf, 2)[0] == []
    with pytest.raises(ValueError, match="shared_memory"):
        _write(space, 0, [{"role": "user", "content": "x" * 100}], buf)


def test_calculator_env_through_rollout_analyze_train_eval(tmp_path, capsys):
    traj = tmp_path / "traj.jsonl"
    code, out, err = run_cli("rollout", f"env={CALC}", "policy=hf", f"policy.model={MODEL}", "episodes=6",
                             "policy.max_new_tokens=24", f"out={traj}", hydra_dir=tmp_path / "h1", capsys=capsys)
    assert code == 0, err
    rows = [json.loads(x) for x in traj.read_text().splitlines()]
    assert len(rows) == 6 and {r["env_id"] for r in rows} == {CALC}
    assert all(r["info"]["task"]["required_capabilities"] == ["arithmetic"] for r in rows)

    code, out, err = run_cli("analyze", f"trajectories={traj}", "imports=[tests.byo.calc_probes]",
                             "analysis.n_runs=2", "analysis.k=1", f"out={tmp_path / 'an'}",
                             hydra_dir=tmp_path / "h2", capsys=capsys)
    assert code == 0, err
    labels = json.loads(sorted((tmp_path / "an" / "labels").glob("run_*.json"))[0].read_text())
    assert "calculator_tool_use" in json.dumps(labels)  # the user's probe labelled the trajectories

    code, out, err = run_cli("train", f"env={CALC}", "adapter=calc", f"model.name_or_path={MODEL}",
                             f"output_dir={tmp_path / 'train'}", "grpo.iterations=1", "grpo.groups_per_iter=2",
                             "grpo.group_size=2", "grpo.max_new_tokens=8", "rollout.max_turns=2",
                             "grpo.progress=false", "grpo.tensorboard=false", hydra_dir=tmp_path / "h3", capsys=capsys)
    assert code == 0, out + err
    adapter = tmp_path / "train" / "adapters" / "calc" / "v0001"
    assert (adapter / "adapter_config.json").is_file()

    code, out, err = run_cli("eval", f"env={CALC}", f"policies.base.model={MODEL}", "episodes=3",
                             f"+policies.calc={{kind: hf, model: {MODEL}, adapter: {adapter}}}",
                             f"out_dir={tmp_path / 'ev'}", hydra_dir=tmp_path / "h4", capsys=capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert set(doc["policies"]) == {"base", "calc"} and doc["policies"]["calc"]["overall"]["n"] == 3
    assert "arithmetic" in doc["policies"]["base"]["per_capability"]


def test_gold_policy_replays_tau2_and_refuses_other_envs(tmp_path, capsys):
    pytest.importorskip("tau2")
    out = tmp_path / "gold.jsonl"
    code, _, err = run_cli("rollout", "env=trace/tau2-retail-v0", "policy=gold", "episodes=2", f"out={out}",
                           hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["policy"] == "gold" and r["success"] for r in rows)
    code, _, err = run_cli("rollout", "env=trace/retail-sim-v0", "policy=gold", "episodes=1",
                           f"out={tmp_path / 'x.jsonl'}", hydra_dir=tmp_path / "h2", capsys=capsys)
    assert code == 2 and "gold replay needs a τ² task" in err
