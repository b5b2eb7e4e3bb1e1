"""The tokenizer and template against the real built-in target (trace/retail-sim-v0)."""

import json

import gymnasium as gym
import pytest

import trace_envs  # noqa: F401  (registers trace/ ids)
from trace_envs.core.parsing import parse_assistant_text
from trace_envs.retail_sim import ScriptedExpert, atomic_vocabulary, run_episode
from trace_train.model import ChatRenderer, build_tokenizer, chat_corpus


@pytest.fixture(scope="module")
def retail():
    env = gym.make("trace/retail-sim-v0")
    episodes = []
    for seed in range(30):
        _, _, transcript = run_episode(env, ScriptedExpert(seed=seed), seed)
        episodes.append((transcript, env.unwrapped._episode.tools.schemas()))
    vocab = atomic_vocabulary()
    return episodes, vocab, build_tokenizer(chat_corpus(episodes), vocab, vocab_size=800, seed=0)


def test_every_retail_id_is_one_token_in_a_tool_call(retail):
    _, vocab, tok = retail
    assert len(vocab) > 500
    for atom in vocab:
        for text in (f'{{"order_id": "{atom}"}}', f'<tool_call>\n{{"name":"f","arguments":{{"x":"{atom}"}}}}'):
            tokens = tok.convert_ids_to_tokens(tok.encode(text, add_special_tokens=False))
            assert tokens.count(atom) == 1, (atom, tokens)


def test_expert_episodes_encode_and_parse_back(retail):
    episodes, vocab, tok = retail
    renderer = ChatRenderer(tok)
    atoms = set(vocab)
    for messages, tools in episodes:
        enc = renderer.encode_episode(messages, tools)
        tokens = tok.convert_ids_to_tokens(enc.ids)
        assistants = [m for m in messages if m["role"] == "assistant"]
        assert len(enc.turns) == len(assistants)
        for (p, n), msg in zip(enc.turns, assistants):
            assert all(enc.loss_mask[p:p + n]) and (p == 0 or enc.loss_mask[p - 1] == 0)
            turn = parse_assistant_text(tok.decode(enc.ids[p:p + n - 1], skip_special_tokens=False))
            assert turn.errors == [] and turn.content == (msg.get("content") or "").strip()
            want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls", [])]
            assert [(c.name, c.arguments) for c in turn.tool_calls] == want
            for _, args in want:  # every copied id is a single sampled token
                for value in args.values():
                    for v in value if isinstance(value, list) else [value]:
                        if isinstance(v, str) and v in atoms:
                            assert v in tokens[p:p + n]


def test_atomic_numbers_make_prices_and_totals_one_token_without_splitting_ids(retail):
    from trace_train.bootstrap.data import domain_vocabulary

    episodes, vocab, _ = retail
    assert domain_vocabulary(0) == list(dict.fromkeys(domain_vocabulary(0)))  # no duplicates, pools first
    numbers = domain_vocabulary(500)
    assert numbers[: len(domain_vocabulary(0))] == domain_vocabulary(0) and numbers[-1] == "499"
    tok = build_tokenizer(chat_corpus(episodes), numbers, vocab_size=800, seed=0)
    order_id = next(a for a in vocab if a.startswith("#W"))
    cases = {'"price":127,': "127", '{"expression":"127 + 111 + 28"}': "111", "You paid $266 for order": "266",
             "costs at most 93 dollars.": "93"}
    for text, number in cases.items():
        tokens = tok.convert_ids_to_tokens(tok.encode(text, add_special_tokens=False))
        assert number in tokens, (text, tokens)
    digits_only = build_tokenizer(chat_corpus(episodes), vocab, vocab_size=800, seed=0)
    assert "127" not in digits_only.convert_ids_to_tokens(digits_only.encode('"price":127,'))
    for atom in (order_id, *[a for a in vocab if a.isdigit()][:50]):  # item ids and zips stay whole
        assert tok.convert_ids_to_tokens(tok.encode(f'"{atom}"', add_special_tokens=False)).count(atom) == 1
    assert tok.convert_ids_to_tokens(tok.encode("1000", add_special_tokens=False)) != ["1000"]
