"""The openai backend against what a server or a config can get wrong: token ids outside the vocabulary, a model
with a second eos id (both backends must record the same turn), impossible ``policy.server`` options, a dead server
and a first prompt longer than the server's context (``trace-rl rollout`` must say so, not exit 0)."""

from __future__ import annotations

import copy
import json

import pytest
from transformers import AutoTokenizer

from tests.cli_runner import run_cli
from tests.rollout_openai.conftest import FAKE_ENV_ID
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_envs.llm_http import BadResponseError, JSONHTTPClient
from trace_train.policies import PolicySpec
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.rollout.model_tokens import load_model_files
from trace_train.rollout.openai_backend import OpenAIRolloutBackend, RolloutServerError, parse_completion
from trace_train.trajectory import read_trajectories

REQ = EpisodeRequest(FAKE_ENV_ID, seed=0, env_kwargs={"turns": 2})


def _answer(ids):
    return 200, json.dumps({"choices": [{"token_ids": ids, "finish_reason": "stop",
                                         "logprobs": {"token_logprobs": [-0.5] * len(ids)}}]})


def _saved(model, tokenizer, path, eos=None):
    """The tiny model as a local model directory (``eos``: its generation config's eos ids)."""
    model = copy.deepcopy(model)
    if eos is not None:
        model.generation_config.eos_token_id = eos
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("bad", ["vocab", 2**40])
def test_token_ids_outside_the_vocabulary_are_a_server_error_naming_the_url(model, tokenizer, bad):
    bad = len(tokenizer) + 5 if bad == "vocab" else bad
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    def hook(path, body, n):
        return _answer([bad, end]) if path == "/v1/completions" else None

    with FakeOpenAIServer(model, tokenizer, hook=hook) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer, retries=0)
        with pytest.raises(RolloutServerError, match=rf"{srv.base_url}/completions.*token id {bad}, outside the "
                                                     rf"model's vocabulary of {len(tokenizer)}"):
            backend.rollout([REQ], SamplingParams(max_new_tokens=4))
    with pytest.raises(BadResponseError, match="outside"):
        parse_completion(json.loads(_answer([0, 7])[1]), vocab_size=7)
    assert parse_completion(json.loads(_answer([0, 6])[1]), vocab_size=7).ids == [0, 6]


def test_the_vocabulary_size_comes_from_the_model_config(model, tokenizer, tmp_path):
    files = load_model_files(str(_saved(model, tokenizer, tmp_path / "m")))
    assert files.vocab_size == model.config.vocab_size
    assert load_model_files("org/hub-name").vocab_size is None  # never fetched


def test_a_second_eos_id_ends_the_turn_in_both_backends_alike(model, tokenizer, tmp_path):
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    other = next(i for i in range(len(tokenizer)) if i != end and i != tokenizer.pad_token_id
                 and tokenizer.decode([i]).strip())
    served_dir = _saved(model, tokenizer, tmp_path / "m", eos=[end, other])
    said = [*tokenizer.encode("hello", add_special_tokens=False), other]

    hf_model = copy.deepcopy(model)
    hf_model.generation_config.eos_token_id = [end, other]
    hf = HFRolloutBackend(hf_model, tokenizer, freeze_gc=False, max_turns=1)
    ep = hf._start(REQ)
    hf._apply_turn(ep, said, [-0.5] * len(said))

    def hook(path, body, n):
        return _answer(said) if path == "/v1/completions" else None

    with FakeOpenAIServer(model, tokenizer, hook=hook) as srv:  # the tokenizer read from the served model's dir
        oa = OpenAIRolloutBackend([srv.base_url], "tiny", AutoTokenizer.from_pretrained(served_dir), max_turns=1)
        (rec,) = oa.rollout([REQ], SamplingParams(max_new_tokens=8))
        (body,) = [b for p, b in srv.log if p == "/v1/completions"]
    assert oa.stop_ids == hf.stop_ids == {end, other}
    assert body["stop_token_ids"] == sorted({end, other})
    assert rec.token_ids == ep.ids and rec.loss_mask == ep.mask
    said_hf = [m["content"] for m in ep.messages if m["role"] == "assistant"]
    assert [m["content"] for m in rec.messages if m["role"] == "assistant"] == said_hf == [tokenizer.decode(said[:-1])]


@pytest.mark.parametrize("server, message", [
    ({"retries": -1}, "policy.server.retries must be an integer >= 0, got -1"),
    ({"backoff": -1}, "policy.server.backoff must be a number of seconds >= 0, got -1"),
    ({"timeout": 0}, "policy.server.timeout must be a number of seconds > 0, got 0"),
    ({"max_concurrency": 0}, "policy.server.max_concurrency must be an integer >= 1, got 0"),
    ({"max_backoff_s": 1}, "policy.server.max_backoff_s: unknown server option"),
    ({"load_inplace": "yes"}, "policy.server.load_inplace must be a bool"),
])
def test_server_options_are_checked_with_the_spec(server, message):
    with pytest.raises(ValueError) as info:
        PolicySpec.from_dict({"kind": "openai", "model": "m", "base_urls": ["http://127.0.0.1:1/v1"],
                              "server": server})
    assert str(info.value).startswith(message)
    with pytest.raises(ValueError, match="backoff_s must be a number of seconds >= 0"):
        JSONHTTPClient(backoff_s=-1)


def _rollout(tmp_path, capsys, model_dir, *overrides):
    capsys.readouterr()  # saving the model draws a progress bar
    return run_cli("rollout", "policy=openai", f"policy.model={model_dir}", "policy.served_model=tiny",
                   f"out={tmp_path}/t.jsonl", *overrides, hydra_dir=f"{tmp_path}/hydra", capsys=capsys)


def test_an_unreachable_server_is_a_one_line_error(model, tokenizer, tmp_path, capsys):
    model_dir = _saved(model, tokenizer, tmp_path / "m")
    code, _, err = _rollout(tmp_path, capsys, model_dir, "policy.base_urls=[http://127.0.0.1:9/v1]",
                            "policy.server.retries=0", "episodes=1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("trace-rl rollout: GET http://127.0.0.1:9/v1/models")


def test_a_first_prompt_longer_than_the_context_fails_the_command(model, tokenizer, tmp_path, capsys):
    model_dir = _saved(model, tokenizer, tmp_path / "m")
    with FakeOpenAIServer(model, tokenizer, max_model_len=30) as srv:
        code, _, err = _rollout(tmp_path, capsys, model_dir, f"policy.base_urls=[{srv.base_url}]", "episodes=2")
        assert not [p for p, _ in srv.log if p == "/v1/completions"]
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "2 of 2 episodes ended before their first turn" in err and "context of 30 tokens" in err
    assert [r.termination for r in read_trajectories(tmp_path / "t.jsonl")] == ["context_limit"] * 2  # kept
