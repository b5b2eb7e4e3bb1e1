"""``kind: openai`` policy specs build a checked backend (and load the adapter) against a server."""

from __future__ import annotations

import copy

import pytest

from tests.rollout_openai.conftest import FAKE_ENV_ID
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_train.grpo.lora import LoraSettings, attach_adapter, save_adapter
from trace_train.policies import PolicySpec, build_backend
from trace_train.rollout import EpisodeRequest
from trace_train.rollout.openai_backend import OpenAIRolloutBackend, RolloutServerError


def test_openai_policy_spec(model, tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "policy")
    peft = attach_adapter(copy.deepcopy(model), "cap", LoraSettings(r=4))
    adapter = save_adapter(peft, "cap", tmp_path / "adapters" / "cap" / "v0005")
    with FakeOpenAIServer(model, tokenizer) as srv:
        spec = PolicySpec.from_dict({"kind": "openai", "name": "cap", "model": str(tmp_path / "policy"),
                                     "served_model": "tiny", "base_urls": [srv.base_url], "adapter": str(adapter),
                                     "max_new_tokens": 5, "server": {"routing": "round_robin", "retries": 0}})
        backend, name = build_backend(spec)
        assert isinstance(backend, OpenAIRolloutBackend) and name == "cap@5"
        assert backend.router.routing == "round_robin" and backend.http.retries == 0
        assert srv.adapters == {"cap@5": str(adapter.resolve())}
        (rec,) = backend.rollout([EpisodeRequest(FAKE_ENV_ID, seed=1, env_kwargs={"turns": 1})], spec.sampling, name)
        assert rec.policy == "cap:cap@5" and sum(rec.loss_mask) <= 5
        assert "<tools>" not in tokenizer.decode(rec.token_ids)  # render_tools follows the spec (False)
        bad = PolicySpec.from_dict({"kind": "openai", "model": str(tmp_path / "policy"), "base_urls": [srv.base_url]})
        with pytest.raises(RolloutServerError, match="does not serve model"):
            build_backend(bad)  # served_model defaults to ``model``, which this server does not serve
    with pytest.raises(ValueError, match="base_urls"):
        PolicySpec.from_dict({"kind": "openai", "model": "x"})
    with pytest.raises(ValueError, match="needs model"):
        PolicySpec.from_dict({"kind": "openai", "base_urls": ["http://127.0.0.1:1/v1"]})
