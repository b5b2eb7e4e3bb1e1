"""The iteration's wall time split (rollout / log-probs / step / env) lands in the metrics."""

import pytest
import torch
from grpo_toy import ENV_ID, FakeBackend, tiny_model

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import LoraSettings

torch.set_num_threads(1)


@pytest.mark.parametrize("epochs,env_s", [(1, None), (2, 0.25)])
def test_the_split_adds_up(tmp_path, epochs, env_s):
    cfg = GRPOConfig(iterations=1, groups_per_iter=2, group_size=4, lr=5e-3, micro_batch_size=4, max_new_tokens=6,
                     seed=3, threads=1, tensorboard=False, progress=False, ppo_epochs=epochs,
                     lora=LoraSettings(r=4, alpha=8))

    def make_backend(model):
        backend = FakeBackend(lambda: model)
        if env_s is not None:
            backend.last_timings = {"env_s": env_s}
        return backend

    trainer = GRPOTrainer(tiny_model(), make_backend, cfg, env=ENV_ID, adapter="a", output_dir=tmp_path)
    row = trainer.run_iteration(0)
    assert row["time_env_s"] == env_s
    assert row["time_logprobs_s"] + row["time_step_s"] == pytest.approx(row["time_update_s"], abs=1e-3)
    assert row["time_step_s"] > 0
    if epochs == 1:  # one step: "old = current" is exact, nothing is recomputed
        assert row["time_logprobs_s"] < row["time_step_s"]
