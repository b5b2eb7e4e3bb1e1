"""What a resume must find unchanged beyond the grpo settings (base model, dtype, env kwargs, rollout options; a
gate-GRPO run's settings and adapters), what stage hashes leave out, and what seeds the update's dropout."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest
import torch
from grpo_toy import ENV_ID, FakeBackend, tiny_model

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.checkpoint import RESUMABLE_CHANGES
from trace_train.grpo.lora import LoraSettings, adapter_state_dict

torch.set_num_threads(1)


def _cfg(**kw) -> GRPOConfig:
    base = dict(iterations=2, groups_per_iter=2, group_size=4, lr=5e-3, micro_batch_size=4, checkpoint_every=2,
                max_new_tokens=6, seed=3, threads=1, tensorboard=False, progress=False,
                lora=LoraSettings(r=4, alpha=8))
    return GRPOConfig(**{**base, **kw})


def _trainer(out, cfg, model=None, resume=False, env_kwargs=None, **backend_attrs):
    holder = {}
    backend = FakeBackend(lambda: holder["model"])
    for key, value in backend_attrs.items():
        setattr(backend, key, value)
    trainer = GRPOTrainer(model if model is not None else tiny_model(0), backend, cfg, env=ENV_ID, adapter="cap",
                          output_dir=out, resume=resume, env_kwargs=env_kwargs)
    holder["model"] = trainer.model
    return trainer


def test_a_resume_onto_another_base_dtype_env_kwargs_or_rollout_is_refused(tmp_path):
    first = _trainer(tmp_path, _cfg(), env_kwargs={"refuse_fraction": 0.5}, max_turns=2)
    first.train()
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["dtype"] == "float32" and len(saved["base_fingerprint"]) == 64
    assert saved["env_kwargs"] == {"refuse_fraction": 0.5} and saved["rollout"] == {"max_turns": 2}
    same = dict(env_kwargs={"refuse_fraction": 0.5}, max_turns=2)
    for what, model, kw in (("base_fingerprint", tiny_model(1), same),
                            ("dtype", tiny_model(0).to(torch.float64), same),
                            ("env_kwargs", None, {**same, "env_kwargs": {"refuse_fraction": 1.0}}),
                            ("rollout", None, {**same, "max_turns": 3})):
        with pytest.raises(ValueError, match=f"trained with other settings \\(.*{what}: "):
            _trainer(tmp_path, _cfg(iterations=4), model=model, resume=True, **kw)
    again = _trainer(tmp_path, _cfg(iterations=4), resume=True, **same)
    assert again.start_iteration == 2


def test_a_checkpoint_made_before_the_base_was_recorded_resumes_with_a_warning(tmp_path, caplog):
    """Refusing would strand every run interrupted before the fields existed; config.json then records them, so
    the resumes after this one are checked."""
    _trainer(tmp_path, _cfg()).train()
    path = tmp_path / "config.json"
    old = {k: v for k, v in json.loads(path.read_text()).items()
           if k not in ("base_fingerprint", "dtype", "env_kwargs", "rollout", "base_model")}
    path.write_text(json.dumps(old))
    with caplog.at_level(logging.WARNING, logger="trace_train.grpo.checkpoint"):
        again = _trainer(tmp_path, _cfg(iterations=4), resume=True)
    assert again.start_iteration == 2
    assert "base_fingerprint, dtype, env_kwargs, rollout" in caplog.text and "cannot be compared" in caplog.text
    assert "base_fingerprint" in json.loads(path.read_text())
    with pytest.raises(ValueError, match="base_fingerprint: "):
        _trainer(tmp_path, _cfg(iterations=4), model=tiny_model(1), resume=True)


def test_logging_settings_leave_the_stage_hash_alone_and_training_settings_do_not():
    cfg = _cfg()
    for key, value in (("progress", True), ("tensorboard", True), ("trackers", ["wandb"]),
                       ("tracker_project", "other")):
        assert replace(cfg, **{key: value}).hash_part() == cfg.hash_part(), key
    for key, value in (("lr", 1e-3), ("threads", 2), ("iterations", 3), ("seed", 4)):
        assert replace(cfg, **{key: value}).hash_part() != cfg.hash_part(), key
    from trace_train.grpo.config import LOGGING_KEYS

    assert LOGGING_KEYS <= RESUMABLE_CHANGES


def _adapter_after_training(tmp_path, dropout: float, rng_draws: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(1234)
    torch.rand(rng_draws)  # whatever the process did before (other stages, other workers)
    trainer = _trainer(tmp_path, _cfg(lora=LoraSettings(r=4, alpha=8, dropout=dropout)))
    trainer.train()
    return adapter_state_dict(trainer.model, "cap")


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_the_same_seed_gives_the_same_adapter_whatever_the_process_drew_before(tmp_path, dropout):
    a = _adapter_after_training(tmp_path / "a", dropout, 1)
    b = _adapter_after_training(tmp_path / "b", dropout, 7)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
