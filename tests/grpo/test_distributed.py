"""Two gloo ranks splitting the groups give the same update as one process on all groups."""

import socket

import torch
import torch.multiprocessing as mp
from grpo_toy import ENV_ID, FakeBackend, ddp_worker, tiny_model

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import adapter_state_dict

torch.set_num_threads(1)

CFG = dict(
    iterations=2,
    groups_per_iter=4,
    group_size=4,
    lr=1e-2,
    micro_batch_size=3,
    ppo_epochs=2,
    mini_batches=1,
    advantage_std="batch",
    checkpoint_every=2,
    seed=11,
    threads=1,
    tensorboard=False,
    progress=False,
    lora={"r": 4, "alpha": 8},
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_match_single_process(tmp_path):
    single_cfg = GRPOConfig.from_mapping(CFG)
    holder = {}
    backend = FakeBackend(lambda: holder["model"])
    trainer = GRPOTrainer(tiny_model(0), backend, single_cfg, env=ENV_ID, adapter="cap", output_dir=tmp_path / "single")
    holder["model"] = trainer.model
    single_hist = trainer.train().history
    want = adapter_state_dict(trainer.model, "cap")

    result = tmp_path / "ddp.pt"
    mp.spawn(ddp_worker, args=(2, _free_port(), str(tmp_path / "ddp"), str(result), CFG), nprocs=2, join=True)
    got = torch.load(result, weights_only=False)
    assert got["requests"] == 2 * 8  # rank 0 played only its half of the groups (2 groups x 4, twice)
    for key, value in want.items():
        assert torch.allclose(got["state"][key], value, atol=2e-6, rtol=1e-5), key
    assert any(float(v.abs().sum()) > 0 for k, v in want.items() if "lora_B" in k)
    for a, b in zip(single_hist, got["history"]):
        assert abs(a["reward_mean"] - b["reward_mean"]) < 1e-9
        assert abs(a["loss"] - b["loss"]) < 1e-5
    # only rank 0 wrote the run files
    assert (tmp_path / "ddp" / "metrics.jsonl").exists()
