"""Performance work on the retail-sim envs keeps every episode the same, bit for bit (issue 25).

Each env id replays seeded episodes: a scripted expert (oracle and imperfect knobs) whose actions are
interleaved with hostile ones (malformed JSON, unknown tools, wrong argument types, ids that name
nothing, an empty turn). The reset observation and info, every step's observation, reward, flags
and info, the final transcript and the DB's state (current, initial snapshot and gold replay) are
hashed. The stored digests were computed from the code before the speed-ups; any change in what
an episode produces changes the digest.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from trace_envs.families import FamilyExpert

N_SEEDS = 12
HOSTILE = [
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0000000"}}</tool_call>',
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": 7}}</tool_call>',
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "cancel_pending_order", "arguments": {"order_id": "x"</tool_call>',
    '<tool_call>{"name": "calculate", "arguments": {"expression": "(17 + 4) * 3 / 2"}}</tool_call>',
    '<tool_call>{"name": "list_all_product_types", "arguments": {}}</tool_call>',
    "",
]
# Digests of the pre-change code (see module docstring). Recompute only for an intended behaviour change,
# together with the env's ``data_version``.
EXPECTED = {
    "trace/retail-sim-v0": "0fb462563904c0b74661000b8fc5738f3a5b2a93238c128ba90a9e165f12959e",
    # session 29: ownership cases give the user an order of their own (no empty order list to read the refusal
    # off); before that the digest was 59d492c4... Session 43: a refusal case's reward breakdown gained ``checked``
    # (a refusal counts only after a read of the entity); without that key the digest is the old 145d69f2...
    "trace/precondition_verification-v0": "b360f3060fc20ff477748c8164a73ffb2d9ec8298072d014c089148fccda9bc1",
    "trace/structured_data_reasoning-v0": "4a370a9ca5a815a1f4c3fa4f1624f7b955bf6cf436309b67b60e37f629fae7b1",
    # session 22: the terminal info gained ``stray_writes``; without that key the digest is the old 2d0e1ed6...
    "trace/multi_step_task_completion-v0": "410bbc8c3078167cbb6a48b2e82501f96b7d7a28453bacc5db5e829458ce3b86",
    "trace/tool_calling_precision-v0": "95333a7f9792b8dc769c6fb715f27192ae3a5ecc80265028b98c1f39386856aa",
}


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=repr, ensure_ascii=False)


def _step_canon(obs: Any, reward: float, terminated: bool, truncated: bool, info: dict[str, Any]) -> bytes:
    # The terminal info's ``transcript`` copy (a newer key) is left out: the transcript is hashed
    # from the env itself, and the digests predate that key.
    info = {k: v for k, v in info.items() if k != "transcript"}
    return _canon([obs, reward, terminated, truncated, info]).encode()


def _db_state(env: Any) -> list[str]:
    episode = env.unwrapped._episode
    dbs = [episode.db, episode.initial_db, getattr(episode, "gold_db", None)]
    # Key order is observable (tool outputs are JSON dumps of DB records), so it is hashed unsorted too.
    return [json.dumps(db, default=repr) for db in dbs]


def recorded_actions(env: Any, seed: int, h: Any) -> list[str]:
    """The actions of one clean expert episode (oracle on even seeds, imperfect on odd ones); its steps and
    end state go into ``h``."""
    knobs = {} if seed % 2 == 0 else {"precondition": 0.5, "structured": 0.5, "multi_step": 0.5, "precision": 0.5}
    policy = FamilyExpert(knobs, seed=seed)
    obs, info = env.reset(seed=seed)
    policy.reset(obs, info, seed=seed)
    actions = []
    while True:
        actions.append(policy.act(obs))
        obs, reward, terminated, truncated, step_info = env.step(actions[-1])
        h.update(_step_canon(obs, reward, terminated, truncated, step_info))
        if terminated or truncated:
            h.update(_canon(_db_state(env)).encode())
            return actions


def episode_digests(env_id: str, seeds: range) -> str:
    """One sha256 over every seeded episode of ``env_id``: its recorded expert actions replayed with a
    hostile action after every second one."""
    env = gym.make(env_id)
    h = hashlib.sha256()
    for seed in seeds:
        script = recorded_actions(env, seed, h)
        actions = [a for k, act in enumerate(script)
                   for a in ([act, HOSTILE[(seed + k) % len(HOSTILE)]] if k % 2 == 1 else [act])]
        obs, info = env.reset(seed=seed)
        h.update(_canon([obs, info]).encode())
        for action in actions:
            obs, reward, terminated, truncated, step_info = env.step(action)
            h.update(_step_canon(obs, reward, terminated, truncated, step_info))
            if terminated or truncated:
                break
        h.update(_canon(env.unwrapped.transcript).encode())
        h.update(_canon(_db_state(env)).encode())
    env.close()
    return h.hexdigest()


@pytest.mark.parametrize("env_id", sorted(EXPECTED))
def test_seeded_episodes_match_stored_fingerprint(env_id: str) -> None:
    assert episode_digests(env_id, range(N_SEEDS)) == EXPECTED[env_id]


def test_fingerprint_sees_a_changed_episode() -> None:
    """The digest depends on the seeds played (it is not a constant of the env)."""
    env_id = "trace/precondition_verification-v0"
    assert episode_digests(env_id, range(3)) != episode_digests(env_id, range(1, 4))
