import pytest
import torch

import trace_train.rollout.hf as hf_module
from tests.model.tiny_domain import TOOLS
from tests.rollout.fake_tool_env import fake_factory
from trace_train.model import render_chat
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12)


def _requests(n_groups=2, group_size=3, turns=3):
    return [EpisodeRequest("fake/tool-v0", seed=g, sample_seed=100 * g + m, env_kwargs={"turns": turns}, group=g)
            for g in range(n_groups) for m in range(group_size)]


def test_records_are_consistent_and_no_drift(model, tokenizer, monkeypatch):
    calls = []
    real = hf_module.generate_turn

    def spy(model_, prompts, *args, **kwargs):
        outs = real(model_, prompts, *args, **kwargs)
        calls.append(([list(p) for p in prompts], [list(o.ids) for o in outs]))
        return outs

    monkeypatch.setattr(hf_module, "generate_turn", spy)
    backend = HFRolloutBackend(model, tokenizer, env_factory=fake_factory)
    records = backend.rollout(_requests(), SAMPLING)
    assert len(calls) == 3 and all(len(p) == 6 for p, _ in calls)  # one batched call per round
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts_seen = [p for p, _ in calls]
    for rec in records:
        ids, mask, lps = rec.token_ids, rec.loss_mask, rec.logprobs
        assert len(ids) == len(mask) == len(lps)
        assert all(lp == 0.0 for lp, m in zip(lps, mask) if m == 0)
        assert all(lp <= 0.0 for lp, m in zip(lps, mask) if m == 1)
        spans = rec.info["turn_spans"]
        assert len(spans) == 3 and sum(mask) == sum(n for _, n in spans)
        for k, (p, n) in enumerate(spans):
            # What the model was conditioned on at turn k is exactly the trainer's prefix.
            assert ids[:p] in prompts_seen[k]
            candidates = [o for q, o in zip(*calls[k]) if q == ids[:p]]  # group members share a prompt
            sampled = ids[p:p + n]
            assert sampled in candidates and all(mask[p:p + n])
            if sampled[-1] != end:  # budget hit: a masked <|im_end|> closes the turn
                assert ids[p + n] == end and mask[p + n] == 0
        # The model was conditioned on exactly the trainer's prefix: one uncached forward over
        # token_ids reproduces every recorded sampler log-prob.
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        pos = [k for k, m in enumerate(mask) if m]
        recomputed = [logp[k - 1, ids[k]].item() for k in pos]
        assert recomputed == pytest.approx([lps[k] for k in pos], abs=1e-4)
        # Re-rendering the recorded messages with the template gives exactly the token stream.
        last = max(i for i, m in enumerate(rec.messages) if m["role"] == "assistant")
        text = render_chat(rec.messages[: last + 1], TOOLS)
        assert tokenizer.decode(ids, skip_special_tokens=False) == text[: text.rfind("<|im_end|>") + len("<|im_end|>")]
        assert rec.reward == 1.0 and rec.termination == "user_stop" and rec.info["format_valid_fraction"] == 1.0
        assert rec.messages[0]["role"] == "system" and rec.messages[-1]["role"] in {"user", "tool"}


def test_episode_independent_of_batch(model, tokenizer):
    backend = HFRolloutBackend(model, tokenizer, env_factory=fake_factory)
    reqs = _requests(n_groups=2, group_size=3)
    together = backend.rollout(reqs, SAMPLING)
    alone = backend.rollout([reqs[4]], SAMPLING)[0]
    assert together[4].token_ids == alone.token_ids
    assert together[4].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    # Different sample seeds inside a group give different samples; reruns are reproducible.
    assert len({tuple(r.token_ids) for r in together[:3]}) == 3
    assert [r.token_ids for r in backend.rollout(reqs, SAMPLING)] == [r.token_ids for r in together]


def test_greedy_and_limits(model, tokenizer):
    backend = HFRolloutBackend(model, tokenizer, env_factory=fake_factory, max_turns=2)
    recs = backend.rollout(_requests(1, 2, turns=5), SamplingParams(greedy=True, max_new_tokens=5))
    assert recs[0].token_ids == recs[1].token_ids  # greedy ignores sample seeds
    assert all(r.termination == "max_turns" and len(r.info["turn_spans"]) == 2 for r in recs)
    small = HFRolloutBackend(model, tokenizer, env_factory=fake_factory, max_context=len(recs[0].token_ids) - 3)
    rec = small.rollout(_requests(1, 1, turns=5), SamplingParams(greedy=True, max_new_tokens=5))[0]
    assert rec.termination == "context_limit" and len(rec.token_ids) <= small.max_context
    assert rec.loss_mask[-1] == 0 or rec.token_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert rec.token_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_a_turn_ended_by_another_eos_token_keeps_it_out_of_the_text(model, tokenizer):
    """Instruct models stop on several eos ids (Qwen: ``<|im_end|>`` and ``<|endoftext|>``). A turn the sampler
    ends with the other one keeps that token in the token stream (it was sampled) but not in what the env and the
    messages see; the turn is still closed with ``<|im_end|>``."""
    backend = HFRolloutBackend(model, tokenizer, env_factory=fake_factory)
    other = next(i for i in range(len(tokenizer)) if i not in backend.stop_ids and i != backend.pad_id
                 and tokenizer.decode([i]).strip())
    backend.stop_ids = {*backend.stop_ids, other}
    ep = backend._start(EpisodeRequest("fake/tool-v0", seed=0, env_kwargs={"turns": 2}))
    said = tokenizer.encode("hello", add_special_tokens=False)
    backend._apply_turn(ep, [*said, other], [-0.5] * (len(said) + 1))
    turn_end = ep.turns[-1][0] + ep.turns[-1][1]
    closing = slice(turn_end - 1, turn_end + 1)
    assert ep.ids[closing] == [other, backend.end_id] and ep.mask[closing] == [1, 0]
    (said_text,) = [m["content"] for m in ep.messages if m["role"] == "assistant"]
    assert said_text == tokenizer.decode(said)
