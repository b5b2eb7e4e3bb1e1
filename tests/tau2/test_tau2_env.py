"""τ² env behaviour on the real tau2 package: protocol, seeding, errors, users, records."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import trace_envs  # noqa: F401
from tests.analysis.llm_server import FakeLLMServer
from tests.tau2.conftest import requires_tau2
from trace_envs.core.parsing import format_tool_call
from trace_envs.tau2.policies import GoldReplayPolicy, run_episode, to_record
from trace_train.trajectory import read_trajectories, write_trajectories

pytestmark = [pytest.mark.tau2, requires_tau2]


def make(domain="retail", **kw):
    return gym.make(f"trace/tau2-{domain}-v0", **kw)


def test_check_env_with_scripted_user():
    env = make("retail", split="test")
    check_env(env.unwrapped, skip_render_check=True)


def test_reset_uses_tau2_greeting_prompt_and_tools():
    from tau2.agent.llm_agent import AGENT_INSTRUCTION
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.registry import registry

    env = make("airline")
    obs, info = env.reset(seed=0, options={"task_id": "5"})
    tau_env = registry.get_env_constructor("airline")()
    assert obs[0] == {"role": "assistant", "content": DEFAULT_FIRST_AGENT_MESSAGE.content}
    assert obs[1]["role"] == "user" and "###" not in obs[1]["content"]
    assert AGENT_INSTRUCTION.strip() in info["system_prompt"] and tau_env.get_policy() in info["system_prompt"]
    assert [t["function"]["name"] for t in info["tools"]] == [t.name for t in tau_env.get_tools()]
    assert info["task"]["task_id"] == "5" and info["task"]["domain"] == "airline"
    from tau2.user.base import OUT_OF_SCOPE, STOP, TRANSFER

    from trace_envs.tau2.users import GREETING, STOP_TOKENS
    assert GREETING == DEFAULT_FIRST_AGENT_MESSAGE.content and STOP_TOKENS == (STOP, TRANSFER, OUT_OF_SCOPE)


def test_seed_selects_task_through_np_random_and_splits():
    env = make("airline", split="train")
    train = set(env.unwrapped.task_set.splits["train"])
    picked = [env.reset(seed=s)[1]["task"]["task_id"] for s in range(12)]
    assert picked == [env.reset(seed=s)[1]["task"]["task_id"] for s in range(12)]  # same seed, same task
    assert set(picked) <= train and len(set(picked)) > 3
    only = make("airline", task_ids=["7", "9"])
    assert {only.reset(seed=s)[1]["task"]["task_id"] for s in range(10)} == {"7", "9"}
    with pytest.raises(ValueError):
        make("airline", split="nope")


def test_bad_tool_calls_become_error_messages_and_are_evaluated_like_tau2():
    env = make("retail", task_file="bundled")
    env.reset(seed=0, options={"task_id": "0"})
    bad = [
        "<tool_call>{not json</tool_call>",
        format_tool_call("launch_rocket", {}),
        format_tool_call("get_order_details", {}),
        format_tool_call("get_order_details", {"order_id": "#W0000000", "extra": 1}),
        format_tool_call("get_order_details", {"order_id": 12}),
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "calculate", "arguments": "{x"}}]},
    ]
    errors = 0
    for action in bad:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs and all(m["role"] == "tool" and m["content"].startswith("Error") for m in obs)
        assert not terminated and not truncated and reward == 0.0
        errors += 1
        assert info["errors"] == errors
    # The errors are part of the trajectory tau2 re-executes; gold replay afterwards still scores 1.
    policy = GoldReplayPolicy.for_env(env)
    done = False
    while not done:
        _, reward, terminated, truncated, info = env.step(policy(None))
        done = terminated or truncated
    assert terminated and reward == 1.0 and info["termination"] == "user_stop"


def test_too_many_errors_truncate_with_reward_zero():
    env = make("retail", max_errors=3)
    env.reset(seed=1)
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(format_tool_call("nope", {}))
    assert truncated and not terminated and reward == 0.0 and info["termination"] == "too_many_errors"


def test_text_with_tool_call_transfer_and_agent_stop():
    env = make("airline")
    env.reset(seed=0, options={"task_id": "0"})
    obs, *_ = env.step("Let me check. " + format_tool_call("get_user_details", {"user_id": "mia_li_3668"}))
    assert obs[0]["role"] == "tool" and json.loads(obs[0]["content"])["user_id"] == "mia_li_3668"
    _, reward, terminated, _, info = env.step(format_tool_call("transfer_to_human_agents", {"summary": "x"}))
    assert terminated and info["termination"] == "transfer" and info["tau2_termination"] == "user_stop"
    env.reset(seed=0, options={"task_id": "0"})
    _, reward, terminated, _, info = env.step("###STOP###")
    assert terminated and info["termination"] == "agent_stop" and info["tau2_termination"] == "agent_stop"
    assert set(info["reward_breakdown"]) == {"db", "communicate"}


def test_llm_user_gets_tau2_prompt_and_role_flipped_history():
    from tau2.user.user_simulator import UserSimulator

    def answer(body, n):
        return "I want to cancel my order." if n == 0 else "###STOP###"

    with FakeLLMServer(answer) as srv:
        env = gym.make("trace/tau2-retail-llm-v0",
                       user_config={"base_url": srv.base_url, "model": "u", "temperature": 0.5, "seed": 11})
        obs, info = env.reset(seed=4, options={"task_id": "3"})
        assert obs[1] == {"role": "user", "content": "I want to cancel my order."}
        env.step(format_tool_call("find_user_id_by_email", {"email": "nobody@example.com"}))
        _, _, terminated, _, info = env.step("Could you give me your email?")
        first, second = srv.requests
    task = env.unwrapped.episode.task
    expected_prompt = UserSimulator(instructions=task.user_scenario, llm="x").system_prompt
    assert first["messages"] == [{"role": "system", "content": expected_prompt},
                                 {"role": "user", "content": "Hi! How can I help you today?"}]
    assert second["messages"][1:] == [
        {"role": "user", "content": "Hi! How can I help you today?"},
        {"role": "assistant", "content": "I want to cancel my order."},
        {"role": "user", "content": "Could you give me your email?"}]  # tool call hidden from the user
    assert first["model"] == "u" and first["temperature"] == 0.5 and first["seed"] == 11
    assert "<scenario>" in expected_prompt and terminated and info["termination"] == "user_stop"


def test_records_feed_trace_rl_analyze(tmp_path):
    from hydra import compose, initialize_config_dir

    from trace_envs.tau2.runtime import pristine_db
    from trace_train.analysis.run import run_analysis
    from trace_train.paths import CONF_DIR

    env = make("retail", split="test", record_db_hash=True)
    ids = env.unwrapped.task_pool[:4]
    records = [run_episode(env, p, seed=0, options={"task_id": t}, env_id="trace/tau2-retail-v0")
               for t in ids for p in ("gold", "noop")]
    assert [r.reward for r in records[::2]] == [1.0] * 4
    initial = pristine_db("retail").get_hash()
    for gold, noop in zip(records[::2], records[1::2]):  # doing nothing passes iff the gold changes nothing
        quiet = gold.info["end_db_hash"] == initial and not gold.info["tau2_task"]["communicate_info"]
        assert noop.reward == float(quiet) and noop.info["end_db_hash"] == initial
    assert 0.0 in [r.reward for r in records[1::2]]
    assert len({r.episode_id for r in records}) == 8 and records[0].info["task_id"] == ids[0]
    path = write_trajectories(tmp_path / "traj.jsonl", records)
    loaded = read_trajectories(path)
    assert loaded[0].messages == records[0].messages and loaded[1].reward_breakdown == records[1].reward_breakdown
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("analyze", overrides=[f"trajectories={path}", "analysis.n_runs=2", "analysis.k=2"])
    out = run_analysis(loaded, cfg.analysis, "programmatic", tmp_path / "out")
    assert out.capabilities and (tmp_path / "out" / "selected_capabilities.json").is_file()
    rec = to_record("trace/tau2-retail-v0", 5, [{"role": "user", "content": "hi"}],
                    {"reward": 0.0, "termination": "max_steps", "task_id": "9"}, policy="p")
    assert rec.termination == "max_steps" and rec.episode_id == "trace/tau2-retail-v0|9|5|p"


def test_nl_assertions_use_the_configured_judge_endpoint():
    """Retail HEAD tasks gate on NL_ASSERTION: with a judge endpoint, tau2's own NL evaluator asks it."""
    verdict = {"met": True}

    def judge(body, n):
        result = {"expectedOutcome": "x", "reasoning": "stub", "metExpectation": verdict["met"]}
        return json.dumps({"results": [result]})

    with FakeLLMServer(judge) as srv:
        env = make("retail", task_file="head", judge={"base_url": srv.base_url, "model": "judge"})
        tasks = env.unwrapped.task_set.tasks
        task_id = next(t for t, task in tasks.items() if task.evaluation_criteria.nl_assertions)
        rewards = []
        for met in (True, False):
            verdict["met"] = met
            rewards.append(run_episode(env, "gold", seed=0, options={"task_id": task_id}))
        assert srv.requests and srv.requests[0]["model"] == "judge"
    assert [r.reward for r in rewards] == [1.0, 0.0]
    assert rewards[0].info["nl_assertions"] == "judged" and rewards[1].reward_breakdown["nl_assertion"] == 0.0


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_env_configs_make_working_envs(domain):
    from omegaconf import OmegaConf

    from trace_train.paths import CONF_DIR

    cfg = OmegaConf.load(CONF_DIR / "targets" / f"tau2_{domain}.yaml")
    env = gym.make(cfg.id, **OmegaConf.to_container(cfg.kwargs))
    obs, info = env.reset(seed=0)
    assert info["task"]["domain"] == domain and obs[1]["role"] == "user"
