"""Server checks and LoRA hot-swap (versioned names / load_inplace), and the GRPO trainer driving them."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.rollout_openai.conftest import FAKE_ENV_ID
from tests.rollout_openai.fake_server import FakeOpenAIServer
from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import LoraSettings, attach_adapter, save_adapter
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.openai_backend import OpenAIRolloutBackend, RolloutServerError
from trace_train.rollout.openai_lora import PROBE_NAME, parse_version

LORA_PATHS = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")


def _lora_calls(*servers):
    """(path, body) of every adapter call but the LoRA probe, in arrival order, per server."""
    return [[(p, b) for p, b in s.log if p in LORA_PATHS and b["lora_name"] != PROBE_NAME] for s in servers]


@pytest.fixture(scope="module")
def adapter_dirs(model, tmp_path_factory):
    """Two versions of adapter ``cap`` with clearly different (random, non-zero) weights."""
    root = tmp_path_factory.mktemp("run")
    peft = attach_adapter(copy.deepcopy(model), "cap", LoraSettings(r=4, alpha=16))
    gen = torch.Generator().manual_seed(0)
    dirs = []
    for version in (1, 2):
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        dirs.append(save_adapter(peft, "cap", root / "adapters" / "cap" / f"v{version:04d}"))
    return dirs


def test_check_server(model, tokenizer):
    with FakeOpenAIServer(model, tokenizer, max_model_len=1234) as srv:
        (info,) = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer).check_server(adapters=True)
        assert info.models == ["tiny"] and info.max_model_len == 1234
        assert srv.paths() == ["/v1/models", "/v1/load_lora_adapter"]  # one probe, nothing loaded
        assert srv.adapters == {}
        with pytest.raises(RolloutServerError, match=r"does not serve model 'big'.*\['tiny'\].*--served-model-name"):
            OpenAIRolloutBackend([srv.base_url], "big", tokenizer).check_server()
    with FakeOpenAIServer(model, tokenizer, runtime_lora=False) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer)
        backend.check_server()  # fine without adapters
        with pytest.raises(RolloutServerError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            backend.check_server(adapters=True)
    with FakeOpenAIServer(model, tokenizer, lora_enabled=False) as srv:
        with pytest.raises(RolloutServerError, match="without LoRA support.*--enable-lora --max-lora-rank"):
            OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer, retries=0).check_server(adapters=True)


def test_parse_version():
    assert parse_version("cap@7", "/x/v0001", None) == ("cap", 7)
    assert parse_version("cap", "/x/adapters/cap/v0012", None) == ("cap", 12)
    assert parse_version("cap", "/x/anything", 3) == ("cap", 3)
    with pytest.raises(ValueError, match="iteration"):
        parse_version("cap", "/x/final", None)


def test_versioned_hot_swap_on_every_server(model, tokenizer, adapter_dirs):
    v1, v2 = (str(d) for d in adapter_dirs)
    greedy = SamplingParams(max_new_tokens=8, greedy=True)
    reqs = [EpisodeRequest(FAKE_ENV_ID, seed=0, sample_seed=0, env_kwargs={"turns": 1})]
    with FakeOpenAIServer(model, tokenizer) as a, FakeOpenAIServer(model, tokenizer) as b:
        backend = OpenAIRolloutBackend([a.base_url, b.base_url], "tiny", tokenizer, routing="round_robin")
        base = backend.rollout(reqs, greedy)[0]
        assert backend.sync_adapter("cap@1", v1) == "cap@1"
        first = backend.rollout(reqs, greedy, "cap@1")[0]
        assert backend.sync_adapter("cap", v2) == "cap@2"  # iteration parsed from .../v0002
        second = backend.rollout(reqs, greedy, "cap@2")[0]
        calls = _lora_calls(a, b)
        assert a.adapters == b.adapters == {"cap@2": v2}
    for server_calls in calls:
        assert server_calls == [
            ("/v1/load_lora_adapter", {"lora_name": "cap@1", "lora_path": v1}),
            ("/v1/load_lora_adapter", {"lora_name": "cap@2", "lora_path": v2}),
            ("/v1/unload_lora_adapter", {"lora_name": "cap@1"}),
        ]
    # Both servers get the new version before any old one is unloaded.
    order = [(p, x["lora_name"], s) for s, srv in enumerate((a, b)) for p, x in srv.log
             if p in LORA_PATHS and x["lora_name"] != PROBE_NAME]
    assert [o[:2] for o in order if o[2] == 0] == [o[:2] for o in order if o[2] == 1]
    assert first.policy == "openai:cap@1" and second.policy == "openai:cap@2"
    completions = [base.token_ids, first.token_ids, second.token_ids]
    assert len({tuple(c) for c in completions}) == 3  # each version samples differently (same seed, same prompt)


def test_inplace_hot_swap_and_resync(model, tokenizer, adapter_dirs, tmp_path):
    v1, v2 = (str(d) for d in adapter_dirs)
    greedy = SamplingParams(max_new_tokens=8, greedy=True)
    reqs = [EpisodeRequest(FAKE_ENV_ID, seed=0, sample_seed=0, env_kwargs={"turns": 1})]
    with FakeOpenAIServer(model, tokenizer) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer, load_inplace=True)
        assert backend.sync_adapter("cap@1", v1) == "cap"
        first = backend.rollout(reqs, greedy, "cap")[0]
        assert backend.sync_adapter("cap@2", v2) == "cap"
        second = backend.rollout(reqs, greedy, "cap")[0]
        (calls,) = _lora_calls(srv)
        assert calls == [("/v1/load_lora_adapter", {"lora_name": "cap", "lora_path": p, "load_inplace": True})
                         for p in (v1, v2)]
        assert first.token_ids != second.token_ids
        # A versioned backend meeting a name left over from an earlier process replaces it in place.
        other = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer)
        other.sync_adapter("cap@1", v1)
        assert other.sync_adapter("cap@1", v1) == "cap@1"  # same version again (resume): in place
        (calls,) = _lora_calls(srv)
        assert [c[1].get("load_inplace", False) for c in calls[2:]] == [False, True]
        with pytest.raises(FileNotFoundError):
            backend.sync_adapter("cap@3", str(tmp_path / "missing"))


def test_sync_adapter_checks_the_server_first(model, tokenizer, adapter_dirs):
    with FakeOpenAIServer(model, tokenizer, runtime_lora=False) as srv:
        with pytest.raises(RolloutServerError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer).sync_adapter("cap@1", str(adapter_dirs[0]))
        assert srv.paths() == ["/v1/models", "/v1/load_lora_adapter"]


def test_failed_adapter_load_is_loud(model, tokenizer, tmp_path):
    (tmp_path / "v0001").mkdir()  # exists but holds no adapter
    with FakeOpenAIServer(model, tokenizer) as srv:
        with pytest.raises(RolloutServerError, match="HTTP 404: Loading lora cap@1 failed: No adapter found"):
            OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer).sync_adapter("cap", str(tmp_path / "v0001"))


def test_grpo_trainer_hot_swaps_each_iteration(model, tokenizer, tmp_path):
    cfg = GRPOConfig(iterations=2, groups_per_iter=1, group_size=2, lr=1e-2, micro_batch_size=2,
                     checkpoint_every=2, max_new_tokens=6, seed=0, threads=1, tensorboard=False, progress=False,
                     lora=LoraSettings(r=4, alpha=8))
    with FakeOpenAIServer(model, tokenizer) as srv:
        backend = OpenAIRolloutBackend([srv.base_url], "tiny", tokenizer)
        trainer = GRPOTrainer(copy.deepcopy(model), backend, cfg, env=FAKE_ENV_ID, adapter="cap",
                              output_dir=tmp_path, env_kwargs={"turns": 2})
        result = trainer.train()
        log = [(p, b.get("lora_name") or b.get("model")) for p, b in srv.log if p != "/v1/models"]
    assert result.iterations == 2
    assert log[0] == ("/v1/load_lora_adapter", PROBE_NAME) and PROBE_NAME not in dict(log[1:]).values()
    log = log[1:]  # the LoRA probe of the first sync_adapter
    v0, v1 = (str((tmp_path / "adapters" / "cap" / f"v{i:04d}").resolve()) for i in (0, 1))
    loads = [b["lora_path"] for p, b in srv.log if p == "/v1/load_lora_adapter" and b["lora_name"] != PROBE_NAME]
    assert loads == [v0, v1]
    assert log[0] == ("/v1/load_lora_adapter", "cap@0")
    k = log.index(("/v1/load_lora_adapter", "cap@1"))
    assert set(log[1:k]) == {("/v1/completions", "cap@0")} and k == 1 + 2 * 2  # 2 members x 2 turns
    assert log[k + 1] == ("/v1/unload_lora_adapter", "cap@0")
    assert set(log[k + 2:]) == {("/v1/completions", "cap@1")}
