"""An env that raises ends only its own episode (``env_error``), in the hf and scripted backends."""

from __future__ import annotations

import logging

import gymnasium as gym
import pytest

from tests.rollout.fake_tool_env import FakeToolEnv
from trace_envs.retail_sim import ScriptedExpert
from trace_envs.retail_sim.env import RetailSimEnv
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.base import ENV_ERROR
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.scripted import ScriptedRolloutBackend
from trace_train.trajectory import read_trajectories, write_trajectories

GREEDY = SamplingParams(max_new_tokens=10, greedy=True)


class EnvCrash(RuntimeError):
    pass


class FailingToolEnv(FakeToolEnv):
    """``FakeToolEnv`` that raises ``EnvCrash`` on step ``fail_step`` (1-based) or in ``reset``."""

    def __init__(self, turns: int = 3, fail_step: int | None = None, fail_reset: bool = False):
        super().__init__(turns=turns)
        self.fail_step = fail_step
        self.fail_reset = fail_reset

    def reset(self, *, seed=None, options=None):
        if self.fail_reset:
            raise EnvCrash("reset exploded")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self._t + 1 == self.fail_step:
            raise EnvCrash(f"step {self.fail_step} exploded")
        return super().step(action)


def failing_factory(env_id, **kwargs):
    assert env_id == "fake/tool-v0"
    return FailingToolEnv(**kwargs)


def normal_requests() -> list[EpisodeRequest]:
    return [EpisodeRequest("fake/tool-v0", seed=g, sample_seed=100 * g + m, env_kwargs={"turns": 3}, group=g)
            for g in range(2) for m in range(2)]


def with_failures(normal: list[EpisodeRequest]) -> list[EpisodeRequest]:
    """The normal requests with a member failing at step 2 and one failing in reset, in the middle."""
    step_fail = EpisodeRequest("fake/tool-v0", seed=7, sample_seed=5, env_kwargs={"turns": 3, "fail_step": 2})
    reset_fail = EpisodeRequest("fake/tool-v0", seed=8, sample_seed=6, env_kwargs={"turns": 3, "fail_reset": True})
    return [normal[0], step_fail, normal[1], reset_fail, *normal[2:]]


def assert_same_records(got, expected) -> None:
    for a, b in zip(got, expected, strict=True):
        da, db = a.to_dict(), b.to_dict()
        lp_a, lp_b = da.pop("logprobs"), db.pop("logprobs")
        assert da == db
        assert lp_a == pytest.approx(lp_b, abs=1e-4)


def check_failed_records(records, tmp_path) -> None:
    step_rec, reset_rec = records[1], records[3]
    for rec, stage, turn, message in [(step_rec, "step", 2, "step 2 exploded"),
                                      (reset_rec, "reset", 0, "reset exploded")]:
        assert rec.termination == ENV_ERROR
        assert rec.reward == 0.0 and rec.success is False and rec.reward_breakdown == {}
        assert rec.info["env_error"] == {"type": "EnvCrash", "message": message, "stage": stage, "turn": turn}
    # The step failure keeps what was played: two sampled turns, the first observation, no second one.
    assert len(step_rec.info["turn_spans"]) == 2 and sum(step_rec.loss_mask) > 0
    assert [m["role"] for m in step_rec.messages].count("assistant") == 2
    assert reset_rec.token_ids == [] and reset_rec.messages == []
    # Every record (failed ones too) is a normal, writable trajectory.
    path = write_trajectories(tmp_path / "t.jsonl", records)
    assert [r.to_dict() for r in read_trajectories(path)] == [r.to_dict() for r in records]


def test_hf_env_error_ends_only_that_episode(model, tokenizer, tmp_path, caplog):
    normal = normal_requests()
    baseline = HFRolloutBackend(model, tokenizer, env_factory=failing_factory).rollout(normal, GREEDY)
    backend = HFRolloutBackend(model, tokenizer, env_factory=failing_factory)
    with caplog.at_level(logging.WARNING, logger="trace_train.rollout.hf"):
        records = backend.rollout(with_failures(normal), GREEDY)
    assert len(records) == 6
    check_failed_records(records, tmp_path)
    assert_same_records([records[i] for i in (0, 2, 4, 5)], baseline)
    assert all(r.termination == "user_stop" for r in baseline)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all("EnvCrash" in w and ENV_ERROR in w for w in warned)


def test_hf_env_error_with_max_batch(model, tokenizer):
    """Chunked generation (max_batch) skips the finished failing episode too."""
    backend = HFRolloutBackend(model, tokenizer, env_factory=failing_factory, max_batch=2)
    records = backend.rollout(with_failures(normal_requests()), GREEDY)
    assert [r.termination for r in records] == ["user_stop", ENV_ERROR, "user_stop", ENV_ERROR, "user_stop",
                                                "user_stop"]


# -- scripted backend ---------------------------------------------------------------------------
FAILING_RETAIL = "trace_test/failing-retail-sim-v0"


class FailingRetailSim(RetailSimEnv):
    """retail-sim whose episode with seed ``fail_seed`` raises on step 2."""

    def __init__(self, fail_seed: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.fail_seed = fail_seed
        self._seed = None

    def reset(self, *, seed=None, options=None):
        self._seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self._seed == self.fail_seed and self._steps == 1:
            raise EnvCrash("step 2 exploded")
        return super().step(action)


if FAILING_RETAIL not in gym.registry:
    gym.register(FAILING_RETAIL, entry_point=FailingRetailSim, disable_env_checker=True)


def test_scripted_env_error_ends_only_that_episode(tmp_path, caplog):
    requests = [EpisodeRequest(FAILING_RETAIL, seed=s, sample_seed=s, env_kwargs={"fail_seed": 2}) for s in range(5)]
    baseline_requests = [EpisodeRequest(FAILING_RETAIL, seed=s, sample_seed=s, env_kwargs={"fail_seed": 2})
                         for s in (0, 1, 3, 4)]
    with caplog.at_level(logging.WARNING, logger="trace_train.rollout.scripted"):
        records = ScriptedRolloutBackend(lambda seed: ScriptedExpert()).rollout(requests)
    baseline = ScriptedRolloutBackend(lambda seed: ScriptedExpert()).rollout(baseline_requests)
    assert len(records) == 5
    failed = records[2]
    assert failed.termination == ENV_ERROR and failed.reward == 0.0 and not failed.success
    assert failed.info["env_error"] == {"type": "EnvCrash", "message": "step 2 exploded", "stage": "step", "turn": 2}
    assert failed.info["task"] is not None and failed.messages[0]["role"] == "system"
    assert [r.to_dict() for r in records[:2] + records[3:]] == [r.to_dict() for r in baseline]
    assert all(r.termination != ENV_ERROR for r in baseline)
    assert any("EnvCrash" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    write_trajectories(tmp_path / "s.jsonl", records)


def test_scripted_reset_error():
    class Crashing(RetailSimEnv):
        def reset(self, *, seed=None, options=None):
            raise EnvCrash("no world today")

    env_id = "trace_test/crashing-reset-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=Crashing, disable_env_checker=True)
    records = ScriptedRolloutBackend(lambda seed: ScriptedExpert()).rollout(
        [EpisodeRequest(env_id, seed=0), EpisodeRequest(env_id, seed=1)])
    assert [r.termination for r in records] == [ENV_ERROR, ENV_ERROR]
    assert records[0].info["env_error"]["stage"] == "reset" and records[0].messages == []


def test_hf_a_request_that_cannot_start_closes_the_envs_made_before_it(model, tokenizer):
    """A hint asked of an env without hints fails the rollout (a caller's error), but the envs already made and
    reset for the requests before it are closed, not leaked (SWE envs hold sandboxes)."""
    made, closed = [], []

    class Tracked(FakeToolEnv):
        def close(self):
            closed.append(self)
            super().close()

    def factory(env_id, **kwargs):
        made.append(Tracked(**kwargs))
        return made[-1]

    requests = [*normal_requests()[:3], EpisodeRequest("fake/tool-v0", seed=9, env_kwargs={"turns": 2}, hint=True)]
    with pytest.raises(ValueError, match="hint"):
        HFRolloutBackend(model, tokenizer, env_factory=factory).rollout(requests, GREEDY)
    assert len(made) == 4 and len(closed) == 4 and all(env in closed for env in made)
