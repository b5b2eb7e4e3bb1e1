"""grpo.loss_denominator: the loss averaged over the informative samples (default) or over every sampled record."""

import numpy as np
import pytest
import torch
from grpo_toy import BOS, ENV_ID, FakeBackend, tiny_model
from test_packing import _adapted
from test_trainer import make_trainer, small_config

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import trainable_parameters
from trace_train.grpo.loss import denominator_scale
from trace_train.grpo.update import Sample, optimize, sequence_logprobs
from trace_train.trajectory import read_trajectories

torch.set_num_threads(1)


def test_denominator_scale():
    assert denominator_scale("informative", 10, 40) == 1.0
    assert denominator_scale("sampled", 10, 40) == 4.0
    assert denominator_scale("sampled", 0, 40) == 1.0  # nothing to train on: no step is taken anyway
    with pytest.raises(ValueError, match="loss_denominator must be one of"):
        denominator_scale("all", 10, 40)
    with pytest.raises(ValueError, match="cannot be fewer"):
        denominator_scale("sampled", 10, 5)


def test_config_validates_the_mode_and_leaves_the_default_out_of_hashes():
    with pytest.raises(ValueError, match="loss_denominator must be one of"):
        GRPOConfig(loss_denominator="tokens").validate()
    assert "loss_denominator" not in GRPOConfig().hash_part()
    assert GRPOConfig(loss_denominator="sampled").hash_part()["loss_denominator"] == "sampled"


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_a_scaled_denominator_scales_every_step(level):
    """SGD without clipping: dividing every mini-batch's loss by 4 is SGD at a quarter of the learning rate, over
    two epochs of two mini-batches each (every step, not only the first)."""
    g = torch.Generator().manual_seed(0)
    samples = [Sample([BOS, *torch.randint(3, 12, (n + 1,), generator=g).tolist()], [0, 0] + [1] * n, advantage=a)
               for n, a in ((6, 1.0), (3, -0.5), (5, 0.8), (2, -1.3))]
    cfg = GRPOConfig(micro_batch_size=2, grad_clip=0.0, loss_level=level, mini_batches=2, ppo_epochs=2)
    after = {}
    for scale, lr in ((4.0, 1.0), (1.0, 0.25), (1.0, 1.0)):
        lora = _adapted(tiny_model(0))  # a LoRA with B != 0, so A gets gradient too
        params = [p for _, p in trainable_parameters(lora)]
        before = [p.detach().clone() for p in params]
        lora.eval()
        old = sequence_logprobs(lora, samples, 2, 1.0)  # ratios move off 1 after the first step
        optimize(lora, torch.optim.SGD(params, lr=lr), params, samples, cfg, 0, old, None, denominator_scale=scale)
        after[scale, lr] = [b - p.detach() for b, p in zip(before, params)]
    assert max(float(d.abs().max()) for d in after[1.0, 1.0]) > 1e-4  # the steps are not trivially zero
    for scaled, slower, full in zip(after[4.0, 1.0], after[1.0, 0.25], after[1.0, 1.0]):
        assert torch.allclose(scaled, slower, rtol=1e-4, atol=1e-7)
    assert any(not torch.allclose(4 * a, b, rtol=1e-3) for a, b in zip(after[4.0, 1.0], after[1.0, 1.0]))


class _UnevenBackend(FakeBackend):
    """The toy backend with every third record's last completion token masked out: groups of unequal token counts,
    so counting tokens and counting sequences give different scales."""

    def rollout(self, requests, sampling, adapter=None):
        records = super().rollout(requests, sampling, adapter)
        for i, record in enumerate(records):
            if i % 3 == 0:
                record.loss_mask = [*record.loss_mask[:-1], 0]
        return records


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_sampled_denominator_counts_every_record_of_the_iteration(tmp_path, monkeypatch, level):
    """Two completion tokens per member make rewards 0, 0.5 or 1, so some groups are constant; the scale the trainer
    hands the update is every record's trainable tokens (sequences) over those of the informative groups' records."""
    import trace_train.grpo.trainer as trainer_module

    scales = []

    def recording_optimize(*args):
        scales.append(args[9])  # the trainer passes every argument by position
        return optimize(*args)

    monkeypatch.setattr(trainer_module, "optimize", recording_optimize)
    holder = {}
    cfg = small_config(iterations=1, checkpoint_every=1, groups_per_iter=6, loss_level=level,
                       loss_denominator="sampled")
    trainer = GRPOTrainer(tiny_model(0), _UnevenBackend(lambda: holder["model"], completion_len=2), cfg, env=ENV_ID,
                          adapter="cap", output_dir=tmp_path)
    holder["model"] = trainer.model
    metrics = trainer.run_iteration(0)
    records = read_trajectories(tmp_path / "rollouts" / "iter_0000.jsonl")
    rewards = np.array([r.reward for r in records]).reshape(6, 4)
    informative = np.repeat(rewards.max(axis=1) > rewards.min(axis=1), 4)
    assert 0 < informative.sum() < 24  # the test's premise: some constant groups, some with signal
    units = np.array([sum(r.loss_mask[1:]) if level == "token" else 1 for r in records], dtype=float)
    assert len(set(units)) == (2 if level == "token" else 1)
    tokens = np.array([sum(r.loss_mask[1:]) for r in records], dtype=float)
    assert tokens.sum() / tokens[informative].sum() != pytest.approx(24 / informative.sum())  # the two units differ
    assert metrics["trained_samples"] == informative.sum()
    assert metrics["denominator_scale"] == scales[0] == pytest.approx(units.sum() / units[informative].sum())
    plain, _ = make_trainer(tmp_path / "plain", small_config(iterations=1, checkpoint_every=1, groups_per_iter=6),
                            completion_len=2)
    assert "denominator_scale" not in plain.run_iteration(0) and scales[1] == 1.0


def test_the_sampled_denominator_refuses_a_kl_term():
    """The constant groups' records are not run through the model, so their KL term could not be counted."""
    with pytest.raises(ValueError, match="set kl_beta=0"):
        GRPOConfig(loss_denominator="sampled", kl_beta=0.1).validate()
    GRPOConfig(loss_denominator="sampled").validate()
