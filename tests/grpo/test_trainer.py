import json

import numpy as np
import pytest
import torch
from grpo_toy import ENV_ID, FakeBackend, tiny_model

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import LoraSettings, adapter_state_dict, base_fingerprint
from trace_train.trajectory import read_trajectories

torch.set_num_threads(1)


def small_config(**kw) -> GRPOConfig:
    base = dict(
        iterations=2,
        groups_per_iter=2,
        group_size=4,
        lr=5e-3,
        micro_batch_size=4,
        checkpoint_every=2,
        max_new_tokens=6,
        temperature=1.0,
        seed=3,
        threads=1,
        tensorboard=False,
        progress=False,
        lora=LoraSettings(r=4, alpha=8),
    )
    base.update(kw)
    return GRPOConfig(**base)


def make_trainer(tmp_path, cfg, env=ENV_ID, adapter="cap", resume=False, **backend_kw):
    holder = {}
    backend = FakeBackend(lambda: holder["model"], **backend_kw)
    trainer = GRPOTrainer(tiny_model(0), backend, cfg, env=env, adapter=adapter, output_dir=tmp_path, resume=resume)
    holder["model"] = trainer.model
    return trainer, backend


def test_iteration_uses_seeded_groups_and_logs(tmp_path):
    trainer, backend = make_trainer(tmp_path, small_config(iterations=1, checkpoint_every=1, tensorboard=True))
    base = base_fingerprint(trainer.model)
    result = trainer.train()
    (requests,) = backend.calls
    assert len(requests) == 8
    for g in range(2):
        members = requests[g * 4 : (g + 1) * 4]
        assert len({r.seed for r in members}) == 1 and len({r.sample_seed for r in members}) == 4
    assert requests[0].seed != requests[4].seed
    seeds = [json.loads(line) for line in (tmp_path / "seeds.jsonl").read_text().splitlines()]
    assert [s["env_seed"] for s in seeds] == [requests[0].seed, requests[4].seed]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    for key in (
        "reward_mean",
        "success_rate",
        "constant_group_fraction",
        "clip_fraction",
        "entropy",
        "approx_kl",
        "grad_norm",
        "rollout_tokens_per_s",
    ):
        assert key in rows[0], key
    assert rows[0]["entropy"] > 0 and rows[0]["grad_norm"] > 0
    assert len(read_trajectories(tmp_path / "rollouts" / "iter_0000.jsonl")) == 8
    assert (result.adapter_dir / "adapter_model.safetensors").exists()
    assert result.adapter_dir == tmp_path / "adapters" / "cap" / "v0001"
    assert base_fingerprint(trainer.model) == base
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        assert not (tmp_path / "tb").exists()
    else:
        assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_resume_gives_identical_adapter(tmp_path):
    full, _ = make_trainer(tmp_path / "full", small_config(iterations=4, checkpoint_every=2))
    full.train()
    want = adapter_state_dict(full.model, "cap")

    # the interrupted run got one iteration past its last checkpoint (logged, never saved)
    first, _ = make_trainer(tmp_path / "split", small_config(iterations=3, checkpoint_every=2))
    from trace_train.grpo.checkpoint import save_checkpoint

    for i in range(3):  # what train() does, with a crash after iteration 2 was logged
        first.metrics.log(i, first.run_iteration(i))
        if i == 1:
            save_checkpoint(tmp_path / "split", 2, first.model, "cap", first.optimizer)
    second, backend = make_trainer(tmp_path / "split", small_config(iterations=4, checkpoint_every=2), resume=True)
    assert second.start_iteration == 2
    second.train()
    assert len(backend.calls) == 2  # only iterations 2 and 3 were played again
    got = adapter_state_dict(second.model, "cap")
    assert want.keys() == got.keys()
    moved = False
    for key in want:
        assert torch.equal(want[key], got[key]), key
        moved |= "lora_B" in key and bool(want[key].abs().sum() > 0)
    assert moved
    rows = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == [0, 1, 2, 3]


def test_a_kill_between_the_version_and_its_checkpoint_replays_and_publishes_it(tmp_path, monkeypatch):
    import trace_train.grpo.trainer as trainer_module

    full, _ = make_trainer(tmp_path / "full", small_config(iterations=4, checkpoint_every=2))
    full.train()
    want = adapter_state_dict(full.model, "cap")
    real = trainer_module.save_checkpoint

    def killed_at_4(out_dir, iteration, *args, **kwargs):
        if iteration == 4:
            raise KeyboardInterrupt("killed after v0004, before its checkpoint")
        return real(out_dir, iteration, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "save_checkpoint", killed_at_4)
    first, _ = make_trainer(tmp_path / "split", small_config(iterations=4, checkpoint_every=2))
    with pytest.raises(KeyboardInterrupt):
        first.train()
    monkeypatch.setattr(trainer_module, "save_checkpoint", real)
    second, backend = make_trainer(tmp_path / "split", small_config(iterations=4, checkpoint_every=2), resume=True)
    assert second.start_iteration == 2
    result = second.train()
    assert len(backend.calls) == 2  # iterations 2 and 3 played again, v0004 published again
    assert result.adapter_dir == tmp_path / "split" / "adapters" / "cap" / "v0004"
    from safetensors.torch import load_file

    got = load_file(result.adapter_dir / "adapter_model.safetensors")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_a_checkpoint_without_its_version_gets_it_on_resume(tmp_path):
    """A run killed between checkpoint and version before the version came first: resuming at its last
    checkpoint trains nothing, writes the missing version from the checkpoint and returns it."""
    import shutil

    from safetensors.torch import load_file

    full, _ = make_trainer(tmp_path, small_config(iterations=4, checkpoint_every=2))
    full.train()
    want = adapter_state_dict(full.model, "cap")
    shutil.rmtree(tmp_path / "adapters" / "cap" / "v0004")
    again, backend = make_trainer(tmp_path, small_config(iterations=4, checkpoint_every=2), resume=True)
    result = again.train()
    assert again.start_iteration == 4 and backend.calls == []
    assert result.adapter_dir == tmp_path / "adapters" / "cap" / "v0004"
    got = load_file(result.adapter_dir / "adapter_model.safetensors")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert (tmp_path / "adapters" / "cap" / "v0002").exists()


def test_grpo_raises_reward_on_toy_env(tmp_path):
    cfg = small_config(iterations=14, groups_per_iter=4, lr=1.5e-2, checkpoint_every=100, mini_batches=2, ppo_epochs=2)
    trainer, _ = make_trainer(tmp_path, cfg)
    history = trainer.train().history
    early = np.mean([h["reward_mean"] for h in history[:3]])
    late = np.mean([h["reward_mean"] for h in history[-3:]])
    # random policy: ~1/12; measured over run seeds 3-5: +0.07 to +0.30 after 14 iterations
    assert late > early + 0.06 and late > 1.5 * early, (early, late)
    assert any(h["clip_fraction"] > 0 for h in history)  # several steps per iteration actually clip
    assert all(h["optimizer_steps"] == 4 for h in history)


def test_format_penalty_and_kl_and_sft_mode(tmp_path):
    t, _ = make_trainer(
        tmp_path / "fmt", small_config(iterations=1, format_penalty=0.5, kl_beta=0.1), valid_fraction=0.5
    )
    m = t.run_iteration(0)
    assert m["reward_mean"] == pytest.approx(m["env_reward_mean"] - 0.25)
    assert m["format_valid"] == 0.5 and m["ref_kl"] >= 0
    s, _ = make_trainer(
        tmp_path / "sft", small_config(iterations=1, mode="sft", group_size=1, groups_per_iter=8), success_at=0.15
    )
    m = s.run_iteration(0)
    assert 0 < m["trained_samples"] < 8  # only the successful records are trained on
    assert m["trained_samples"] == round(m["success_rate"] * 8) and m["nll"] > 0


def test_sft_warmup_updates_by_sft_first_then_by_grpo(tmp_path):
    """The first sft_warmup_iterations are SFT-mode iterations exactly (same adapter as an SFT run), then GRPO."""
    warm, _ = make_trainer(tmp_path / "warm", small_config(iterations=3, sft_warmup_iterations=2, checkpoint_every=1),
                           success_at=0.15)
    sft, _ = make_trainer(tmp_path / "sft", small_config(iterations=2, mode="sft", checkpoint_every=1),
                          success_at=0.15)
    history = [warm.run_iteration(0), warm.run_iteration(1)]
    sft.train()
    after_sft = {k: v.clone() for k, v in adapter_state_dict(warm.model, "cap").items()}
    want = adapter_state_dict(sft.model, "cap")
    assert all(torch.equal(after_sft[k], want[k]) for k in want)
    assert any("lora_B" in k and want[k].abs().sum() > 0 for k in want)  # the SFT iterations moved the adapter
    history.append(warm.run_iteration(2))
    assert [h["sft_update"] for h in history] == [1.0, 1.0, 0.0]
    assert all("nll" in h and "clip_fraction" not in h for h in history[:2])
    assert "clip_fraction" in history[2] and "nll" not in history[2]
    assert history[0]["trained_samples"] == round(history[0]["success_rate"] * 8)  # successes only while SFT
    moved = adapter_state_dict(warm.model, "cap")
    assert any(not torch.equal(moved[k], after_sft[k]) for k in moved)


def test_sft_warmup_is_left_out_of_stage_hashes_at_its_default():
    """Run directories made before the warm-up existed keep their stage hashes; setting it changes them."""
    plain = GRPOConfig()
    added_later = ("sft_warmup_iterations", "twin_groups", "loss_denominator")
    assert plain.hash_part() == {k: v for k, v in plain.to_dict().items() if k not in added_later}
    assert plain.mode_at(0) == "grpo" and GRPOConfig(mode="sft").mode_at(5) == "sft"
    warm = GRPOConfig(sft_warmup_iterations=3)
    assert warm.hash_part()["sft_warmup_iterations"] == 3
    assert [warm.mode_at(i) for i in range(5)] == ["sft", "sft", "sft", "grpo", "grpo"]
    with pytest.raises(ValueError, match="sft_warmup_iterations must be >= 0"):
        GRPOConfig(sft_warmup_iterations=-1).validate()


def test_multi_env_mixture_one_adapter(tmp_path):
    import gymnasium as gym
    from grpo_toy import TargetTokenEnv

    other = "grpo_toy/TargetTokenB-v0"
    if other not in gym.registry:
        gym.register(other, entry_point=TargetTokenEnv, disable_env_checker=True)
    trainer, backend = make_trainer(
        tmp_path, small_config(iterations=1, groups_per_iter=6), env={ENV_ID: 1.0, other: 1.0}
    )
    m = trainer.run_iteration(0)
    assert sum(m["env_groups"].values()) == 6
    envs = {r.env_id for r in backend.calls[0]}
    assert envs == {ENV_ID, other}


@pytest.mark.parametrize(
    "kw, env, message",
    [
        ({"group_size": 1}, ENV_ID, "group_size must be >= 2"),
        ({"loss_level": "tok"}, ENV_ID, "loss_level"),
        ({}, "grpo_toy/TargetTokn-v0", "unknown env id .* did you mean"),
        ({}, "no_such_module_xyz:foo-v0", "cannot import module"),
        ({"eps": 1.5, "iterations": 0}, ENV_ID, "iterations must be >= 1, got 0\n.*eps must be in"),
    ],
)
def test_bad_configs_fail_fast(tmp_path, kw, env, message):
    backend = FakeBackend(lambda: None)
    with pytest.raises(ValueError, match=message):
        GRPOTrainer(tiny_model(0), backend, small_config(**kw), env=env, adapter="cap", output_dir=tmp_path)
    assert backend.calls == [] and not (tmp_path / "metrics.jsonl").exists()


def test_adapter_clash_needs_resume(tmp_path):
    trainer, _ = make_trainer(tmp_path, small_config(iterations=1, checkpoint_every=1))
    trainer.train()
    with pytest.raises(ValueError, match="adapter name clash"):
        make_trainer(tmp_path, small_config(iterations=1))
    with pytest.raises(ValueError, match="already holds a training run"):
        make_trainer(tmp_path, small_config(iterations=1), adapter="other")
    make_trainer(tmp_path / "fresh", small_config(iterations=1), adapter="other")
    with pytest.raises(ValueError, match=r"grpo\.group_sise: unknown key \(did you mean 'group_size'\?\)"):
        GRPOConfig.from_mapping({"group_sise": 4})
    cfg = GRPOConfig.from_mapping({"group_size": 4, "lora": {"r": 8, "target_modules": ["q_proj"]}})
    assert cfg.lora.r == 8 and cfg.lora.target_modules == ["q_proj"]


def test_default_yaml_mirrors_config_dataclass():
    import dataclasses

    import yaml

    from trace_train.grpo.lora import LoraSettings
    from trace_train.paths import CONF_DIR

    doc = yaml.safe_load((CONF_DIR / "grpo" / "default.yaml").read_text())
    assert set(doc) == {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(doc["lora"]) == {f.name for f in dataclasses.fields(LoraSettings)}
    cfg = GRPOConfig.from_mapping(doc)
    cfg.validate()
    assert cfg.to_dict() == GRPOConfig().to_dict()  # YAML defaults == dataclass defaults


def test_a_run_killed_before_its_first_checkpoint_logs_each_iteration_once_when_resumed(tmp_path):
    first, _ = make_trainer(tmp_path, small_config(iterations=2, checkpoint_every=2))
    first.metrics.log(0, first.run_iteration(0))  # killed after iteration 0 was logged, before any checkpoint
    from trace_train.trajectory import append_jsonl

    append_jsonl(tmp_path / "seeds.jsonl", {"iteration": 0, "group": 0})
    second, _ = make_trainer(tmp_path, small_config(iterations=2, checkpoint_every=2), resume=True)
    assert second.start_iteration == 0
    second.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    seeds = [json.loads(line) for line in (tmp_path / "seeds.jsonl").read_text().splitlines()]
    assert [s["iteration"] for s in seeds] == [0, 0, 1, 1]  # 2 groups per iteration, none doubled


def test_resuming_with_other_training_settings_is_refused(tmp_path):
    """The optimizer state would bring back the checkpoint's learning rate while config.json recorded the new one,
    and later iterations would draw other groups: a resume must train with the settings it started with (how long
    it runs and how it logs may change)."""
    first, _ = make_trainer(tmp_path, small_config(iterations=2, checkpoint_every=2))
    first.train()
    for changed in (dict(lr=1.0), dict(seed=99), dict(group_size=2), dict(weight_decay=0.5)):
        with pytest.raises(ValueError, match=f"trained with other settings \\({next(iter(changed))}: "):
            make_trainer(tmp_path, small_config(iterations=4, checkpoint_every=2, **changed), resume=True)
    with pytest.raises(ValueError, match="env: "):
        make_trainer(tmp_path, small_config(iterations=4), env={ENV_ID: 1.0, "trace/retail-sim-v0": 1.0},
                     resume=True)
    again, _ = make_trainer(tmp_path, small_config(iterations=4, checkpoint_every=1, progress=False), resume=True)
    assert again.start_iteration == 2


def test_resuming_a_run_made_before_a_key_existed_compares_it_with_that_keys_default(tmp_path):
    """A config.json written before a GRPO key existed trained with its default: resuming it with another value
    is refused like any other change, and with the default it goes on."""
    from trace_train.grpo.config import ADDED_LATER

    first, _ = make_trainer(tmp_path, small_config(iterations=2, checkpoint_every=2))
    first.train()
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    for key in ADDED_LATER:  # as a run made before these keys existed recorded it
        saved["grpo"].pop(key)
    path.write_text(json.dumps(saved))
    for changed in (dict(loss_denominator="sampled"), dict(sft_warmup_iterations=1)):  # (the toy env has no twin)
        with pytest.raises(ValueError, match=f"trained with other settings \\({next(iter(changed))}: "):
            make_trainer(tmp_path, small_config(iterations=4, checkpoint_every=2, **changed), resume=True)
    again, _ = make_trainer(tmp_path, small_config(iterations=4, checkpoint_every=2), resume=True)
    assert again.start_iteration == 2
