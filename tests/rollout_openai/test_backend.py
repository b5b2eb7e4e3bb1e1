"""The openai backend against a fake server that samples from a real tiny model: same records as hf."""

from __future__ import annotations

import threading

import pytest

from tests.rollout_openai.conftest import FAKE_ENV_ID
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_train.model import render_chat
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.openai_backend import OpenAIRolloutBackend, _Router, turn_seed
from trace_train.rollout.sampling import episode_sampler_seed
from trace_train.trajectory import TrajectoryRecord


def _requests(n_groups=2, group_size=2, turns=3):
    return [EpisodeRequest(FAKE_ENV_ID, seed=g, sample_seed=100 * g + m, env_kwargs={"turns": turns}, group=g)
            for g in range(n_groups) for m in range(group_size)]


def _completions(server):
    return [body for path, body in server.log if path == "/v1/completions"]


def test_greedy_records_equal_the_hf_backend(model, tokenizer):
    sampling = SamplingParams(max_new_tokens=10, greedy=True)
    reqs = _requests()
    hf = HFRolloutBackend(model, tokenizer, policy_name="p").rollout(reqs, sampling)
    with FakeOpenAIServer(model, tokenizer) as srv:
        records = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer, policy_name="p").rollout(reqs, sampling)
    assert len(records) == len(hf) == 4
    for a, b in zip(records, hf):
        da, db = a.to_dict(), b.to_dict()
        lp_a, lp_b = da.pop("logprobs"), db.pop("logprobs")
        assert da == db  # token ids, mask, messages, reward, info, episode_id: all identical
        assert lp_a == pytest.approx(lp_b, abs=1e-4)
    assert any(len(r.info["turn_spans"]) == 3 for r in records)


def test_sampled_records_are_well_formed_and_reproducible(model, tokenizer):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    reqs = _requests()
    with FakeOpenAIServer(model, tokenizer) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer)
        records = backend.rollout(reqs, sampling)
        again = backend.rollout(reqs, sampling)
        bodies = _completions(srv)
    hf = HFRolloutBackend(model, tokenizer).rollout(reqs, sampling)
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert [r.to_dict() for r in records] == [r.to_dict() for r in again]  # seeds make it deterministic
    assert len({tuple(r.token_ids) for r in records}) == 4                # members differ
    for rec, ref, req in zip(records, hf, reqs):
        TrajectoryRecord.from_dict(rec.to_dict())
        assert rec.to_dict().keys() == ref.to_dict().keys() and rec.info.keys() == ref.info.keys()
        assert rec.episode_id == f"{FAKE_ENV_ID}|{req.seed}|openai|{req.sample_seed}"
        n = len(rec.token_ids)
        assert len(rec.loss_mask) == len(rec.logprobs) == n
        assert sum(rec.loss_mask) == rec.info["generated_tokens"] > 0
        assert all(lp == 0.0 for lp, m in zip(rec.logprobs, rec.loss_mask) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(rec.logprobs, rec.loss_mask) if m == 1)
        last = max(i for i, m in enumerate(rec.messages) if m["role"] == "assistant")
        text = render_chat(rec.messages[: last + 1], rec.info["tools"])
        assert tokenizer.decode(rec.token_ids, skip_special_tokens=False) == text[: text.rfind("<|im_end|>") + 10]
        assert rec.token_ids[-1] == end_id
        # Each turn's request was exactly the stream so far; the sampled ids follow it unchanged.
        mine = [b for b in bodies[: len(bodies) // 2] if b["user"] == f"{FAKE_ENV_ID}|{req.seed}|{req.sample_seed}"]
        assert len(mine) == len(rec.info["turn_spans"])
        for turn, (body, (start, k)) in enumerate(zip(mine, rec.info["turn_spans"])):
            assert body["prompt"] == rec.token_ids[:start] and body["return_token_ids"] is True
            assert body["seed"] == turn_seed(episode_sampler_seed(req.seed, req.sample_seed), turn)
            assert body["stop_token_ids"] == [end_id]
            assert all(rec.loss_mask[start:start + k]) and body["max_tokens"] == 12


def test_budget_cut_turn_gets_a_masked_end_token(model, tokenizer):
    with FakeOpenAIServer(model, tokenizer) as srv:
        (rec,) = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer).rollout(
            _requests(1, 1, turns=1), SamplingParams(max_new_tokens=3))
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ((start, k),) = rec.info["turn_spans"]
    assert k == 3 and rec.token_ids[-1] == end_id and rec.loss_mask[-1] == 0 and rec.logprobs[-1] == 0.0
    assert rec.loss_mask[start:start + 3] == [1, 1, 1] and len(rec.token_ids) == start + 4


def test_round_robin_routing_is_sticky(model, tokenizer):
    with FakeOpenAIServer(model, tokenizer) as a, FakeOpenAIServer(model, tokenizer) as b:
        backend = OpenAIRolloutBackend([a.base_url, b.base_url], "tiny", tokenizer, routing="round_robin")
        reqs = _requests(2, 2)
        backend.rollout(reqs[:3], SamplingParams(max_new_tokens=6))
        backend.rollout(reqs[3:], SamplingParams(max_new_tokens=6))  # the cycle continues across calls
        users = [f"{FAKE_ENV_ID}|{r.seed}|{r.sample_seed}" for r in reqs]
        at_a = [x["user"] for x in _completions(a)]
        at_b = [x["user"] for x in _completions(b)]
        assert set(at_a) == {users[0], users[2]} and set(at_b) == {users[1], users[3]}
        assert all(at_a.count(u) == 3 for u in set(at_a)) and all(at_b.count(u) == 3 for u in set(at_b))
    assert backend.router.live == [0, 0]


def test_least_loaded_routing():
    router = _Router(3, "least_loaded")
    assert [router.acquire() for _ in range(4)] == [0, 1, 2, 0]
    router.release(1)
    router.release(2)
    assert router.acquire() == 1        # live (2, 0, 0), assigned (2, 1, 1): lowest index among ties
    router.release(0)
    router.release(0)                   # live (0, 1, 0), assigned (2, 2, 1)
    assert router.acquire() == 2        # tie on live: the server assigned fewer episodes so far
    assert router.acquire() == 0 and router.live == [1, 1, 1]
    with pytest.raises(ValueError, match="routing"):
        _Router(2, "random")


def test_least_loaded_balances_episodes_and_calls(model, tokenizer):
    with FakeOpenAIServer(model, tokenizer) as a, FakeOpenAIServer(model, tokenizer) as b:
        backend = OpenAIRolloutBackend([a.base_url, b.base_url], "tiny", tokenizer)
        backend.rollout(_requests(1, 1, turns=1), SamplingParams(max_new_tokens=4))
        backend.rollout(_requests(1, 1, turns=1), SamplingParams(max_new_tokens=4))
        assert len(_completions(a)) == len(_completions(b)) == 1
    assert backend.router.assigned == [1, 1] and backend.router.live == [0, 0]


def test_server_context_limit_is_respected(model, tokenizer):
    with FakeOpenAIServer(model, tokenizer) as srv:  # the first prompt's length, from a free run
        (free,) = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer).rollout(
            _requests(1, 1, turns=5), SamplingParams(max_new_tokens=40))
    limit = free.info["turn_spans"][0][0] + 60
    assert len(free.token_ids) > limit
    with FakeOpenAIServer(model, tokenizer, max_model_len=limit) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer)
        (rec,) = backend.rollout(_requests(1, 1, turns=5), SamplingParams(max_new_tokens=40))
    assert backend.max_context == limit
    assert len(rec.token_ids) < limit and rec.termination == "context_limit"
    assert rec.token_ids == free.token_ids[: len(rec.token_ids)]
    assert all(len(b["prompt"]) + b["max_tokens"] <= limit - 1 for b in _completions(srv))


class _InFlight:
    """A server hook that holds each completion until ``expected`` are in flight (or ``wait_s`` passes)."""

    def __init__(self, expected: int, wait_s: float = 20.0) -> None:
        self.expected, self.wait_s = expected, wait_s
        self.active = self.peak = 0
        self.cond = threading.Condition()

    def __call__(self, path, body, n):
        if path != "/v1/completions":
            return None
        with self.cond:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.active >= self.expected, timeout=self.wait_s)
            self.active -= 1
        return None


@pytest.mark.parametrize("workers", [4, 1])
def test_live_episodes_advance_concurrently(model, tokenizer, workers):
    # Counts the requests the server holds at once rather than timing them: a loaded machine
    # cannot make it fail, a backend that serialises episodes (or overshoots the cap) does.
    hook = _InFlight(expected=workers)
    with FakeOpenAIServer(model, tokenizer, hook=hook) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer, max_concurrency=workers)
        backend.check_server()
        records = backend.rollout(_requests(2, 2, turns=1), SamplingParams(max_new_tokens=3))
    assert len(records) == 4
    assert hook.peak == workers
