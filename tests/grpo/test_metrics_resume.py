"""A resumed run's TensorBoard curves: the iterations it replays after its checkpoint show once, not twice."""

from __future__ import annotations

import time

import pytest
import torch
from grpo_toy import ENV_ID, FakeBackend, tiny_model

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import LoraSettings

torch.set_num_threads(1)
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _trainer(out, resume: bool) -> GRPOTrainer:
    holder = {}
    cfg = GRPOConfig(iterations=4, groups_per_iter=2, group_size=4, lr=5e-3, micro_batch_size=4, checkpoint_every=2,
                     max_new_tokens=6, seed=3, threads=1, tensorboard=True, progress=False,
                     lora=LoraSettings(r=4, alpha=8))
    trainer = GRPOTrainer(tiny_model(0), FakeBackend(lambda: holder["model"]), cfg, env=ENV_ID, adapter="cap",
                          output_dir=out, resume=resume)
    holder["model"] = trainer.model
    return trainer


def test_a_resumed_run_logs_each_iteration_once_to_tensorboard(tmp_path):
    first = _trainer(tmp_path, resume=False)
    log = first.metrics.log

    def killed_after_iteration_2(iteration, metrics):
        log(iteration, metrics)
        if iteration == 2:  # logged, but the next checkpoint (after iteration 3) never written
            raise KeyboardInterrupt

    first.metrics.log = killed_after_iteration_2
    with pytest.raises(KeyboardInterrupt):
        first.train()
    time.sleep(1.1)  # TensorBoard orders event files by their name, which carries the second they were opened in
    again = _trainer(tmp_path, resume=True)
    assert again.start_iteration == 2
    again.train()
    events = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/reward_mean")] == [0, 1, 2, 3]
