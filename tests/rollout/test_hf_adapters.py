import pytest
from peft import LoraConfig, get_peft_model

from tests.rollout.fake_tool_env import fake_factory
from trace_train.model import build_model
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend

REQ = [EpisodeRequest("fake/tool-v0", seed=0, sample_seed=7, env_kwargs={"turns": 2})]
SAMPLING = SamplingParams(max_new_tokens=8)


def test_adapter_switching(tokenizer):
    base = build_model("tiny", tokenizer, seed=0)
    plain = HFRolloutBackend(base, tokenizer, env_factory=fake_factory).rollout(REQ, SAMPLING)[0]
    cfg = dict(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    peft_model = get_peft_model(build_model("tiny", tokenizer, seed=0), LoraConfig(**cfg), adapter_name="alpha")
    peft_model.add_adapter("beta", LoraConfig(**cfg))
    backend = HFRolloutBackend(peft_model, tokenizer, env_factory=fake_factory, policy_name="tiny")
    off = backend.rollout(REQ, SAMPLING)[0]
    on_a = backend.rollout(REQ, SAMPLING, adapter="alpha")[0]
    on_b = backend.rollout(REQ, SAMPLING, adapter="beta")[0]
    assert off.logprobs == pytest.approx(plain.logprobs, abs=1e-5) and off.token_ids == plain.token_ids
    assert on_a.logprobs != pytest.approx(off.logprobs, abs=1e-3)
    assert on_a.logprobs != pytest.approx(on_b.logprobs, abs=1e-3)
    assert (off.policy, on_a.policy) == ("tiny", "tiny:alpha")
    assert backend.rollout(REQ, SAMPLING, adapter="alpha")[0].token_ids == on_a.token_ids
    with pytest.raises(ValueError, match="unknown adapter 'gamma'"):
        backend.rollout(REQ, SAMPLING, adapter="gamma")
    with pytest.raises(ValueError, match="not a peft model"):
        HFRolloutBackend(base, tokenizer, env_factory=fake_factory).rollout(REQ, SAMPLING, adapter="alpha")
