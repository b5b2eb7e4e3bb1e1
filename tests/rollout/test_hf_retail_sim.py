"""The hf backend on the real built-in target with an untrained tiny model."""

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401
from trace_envs.retail_sim import ScriptedExpert, atomic_vocabulary, run_episode
from trace_train.model import ChatRenderer, build_model, build_tokenizer, chat_corpus, render_chat
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.trajectory import TrajectoryRecord


def _mask0_segments(ids, spans, end_id):
    """Context segments between policy turns (a forced <|im_end|> after a cut turn is dropped)."""
    segs, prev = [], 0
    for p, n in spans:
        seg = ids[prev:p]
        if segs and seg and seg[0] == end_id:
            seg = seg[1:]
        segs.append(seg)
        prev = p + n
    return segs


@pytest.mark.parametrize("render_tools", [True, False])
def test_retail_rollout_records_match_bc_encoding(render_tools):
    env = gym.make("trace/retail-sim-v0")
    episodes = []
    for seed in range(10):
        _, _, transcript = run_episode(env, ScriptedExpert(seed=seed), seed)
        episodes.append((transcript, env.unwrapped._episode.tools.schemas()))
    tok = build_tokenizer(chat_corpus(episodes), atomic_vocabulary(), vocab_size=600, seed=0)
    backend = HFRolloutBackend(build_model("tiny", tok, seed=0), tok, max_turns=3, render_tools=render_tools)
    reqs = [EpisodeRequest("trace/retail-sim-v0", seed=5, sample_seed=s) for s in range(3)]
    records = backend.rollout(reqs, SamplingParams(max_new_tokens=10))
    tools = episodes[0][1] if render_tools else None
    renderer = ChatRenderer(tok)
    for rec in records:
        TrajectoryRecord.from_dict(rec.to_dict())  # JSON-friendly
        assert rec.messages[0]["role"] == "system" and rec.messages[1]["role"] == "user"
        assert 0.0 <= rec.info["format_valid_fraction"] <= 1.0
        assert rec.info["tools"] == episodes[0][1] and rec.info["task"]  # as the scripted backend records
        assert ("<tools>" in tok.decode(rec.token_ids[:400])) == render_tools
        last = max(i for i, m in enumerate(rec.messages) if m["role"] == "assistant")
        text = render_chat(rec.messages[: last + 1], tools)
        assert tok.decode(rec.token_ids, skip_special_tokens=False) == text[: text.rfind("<|im_end|>") + 10]
        # Behaviour cloning encodes the same context tokens as the rollout saw (one renderer).
        enc = renderer.encode_episode(rec.messages[: last + 1], tools)
        assert _mask0_segments(rec.token_ids, rec.info["turn_spans"], renderer.end_id) == \
            _mask0_segments(enc.ids, enc.turns, renderer.end_id)
