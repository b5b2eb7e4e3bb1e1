"""Behaviour cloning on a tiny budget: loss goes down, a killed run resumes exactly, results are cached."""

import json

import pytest
import torch

from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.compare import model_fingerprint
from trace_train.bootstrap.config import BootstrapConfig, env_data_version
from trace_train.bootstrap.data import (
    Example,
    batch_seeds,
    copy_mask,
    encode,
    entity_token_ids,
    expert_episodes,
    pad_batch,
)
from trace_train.model import ChatRenderer, load_policy
from trace_train.model.chat_template import chat_template

TINY = dict(steps=8, batch_size=2, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=4, warmup_steps=2,
            lr=3e-3, max_len=1024)


def _summary_and_metrics(runner) -> tuple[dict, list[dict]]:
    """``bootstrap.json`` and the ``metrics.jsonl`` rows without their wall-clock fields."""
    summary = json.loads((runner.dir / "bootstrap.json").read_text())
    summary.pop("wall_s")
    rows = [json.loads(line) for line in (runner.dir / "metrics.jsonl").read_text().splitlines()]
    return summary, [{k: v for k, v in row.items() if k != "elapsed_s"} for row in rows]


def _held_out_loss(model_dir, cfg) -> float:
    model, tokenizer = load_policy(model_dir)
    renderer = ChatRenderer(tokenizer)
    examples = [encode(renderer, r, cfg) for r in expert_episodes(cfg, list(range(1_000_000, 1_000_004)))]
    ids, attn, mask, _ = (torch.from_numpy(a) for a in pad_batch(examples, tokenizer.pad_token_id))
    with torch.no_grad():
        return bc.masked_lm_loss(model, ids, attn, mask).item()


def test_bootstrap_lowers_loss_caches_and_keeps_tools_style(tmp_path):
    cfg = BootstrapConfig(**TINY)
    runner = bc.Bootstrapper(cfg, tmp_path)
    untrained = BootstrapConfig(**{**TINY, "steps": 1, "lr": 1e-9, "warmup_steps": 1})
    start = bc.Bootstrapper(untrained, tmp_path)
    start.run(progress=False)
    before = _held_out_loss(start.model_dir, cfg)
    summary = runner.run(progress=False)
    after = _held_out_loss(runner.model_dir, cfg)
    assert after < before - 0.5, (before, after)
    assert summary["config_hash"] == cfg.content_hash() and 0 <= summary["probe"]["id_token_accuracy"] <= 1
    assert "number_token_accuracy" not in summary["probe"]  # digits are not numbers the head can point at
    _, tokenizer = load_policy(runner.model_dir)
    assert tokenizer.chat_template == chat_template("none")  # rollouts render exactly what BC saw
    lines = (runner.dir / "metrics.jsonl").read_text().splitlines()
    assert summary == runner.run(progress=False)  # cached: no second training
    assert (runner.dir / "metrics.jsonl").read_text().splitlines() == lines


def _killed_after_checkpoint(cfg, cache_dir, monkeypatch, step):
    """A bootstrap of ``cfg`` killed right after its step-``step`` checkpoint (not resumed yet)."""
    original = bc._save_checkpoint

    def save_then_die(path, model, optimizer, at, elapsed, head=None, **kwargs):
        original(path, model, optimizer, at, elapsed, head, **kwargs)
        if at == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(bc, "_save_checkpoint", save_then_die)
    killed = bc.Bootstrapper(cfg, cache_dir)
    with pytest.raises(KeyboardInterrupt):
        killed.run(progress=False)
    monkeypatch.setattr(bc, "_save_checkpoint", original)
    return killed


@pytest.mark.parametrize("decision_weight,packing,numbers,focus",
                         [(0.0, "none", 0, None), (1.0, "none", 0, None), (1.0, "packed", 0, None),
                          (1.0, "packed", 1000, None), (1.0, "packed", 0, {"env_kwargs": {"kinds": ["return"]},
                                                                           "batch_size": 2})])
def test_killed_bootstrap_resumes_to_the_same_weights(tmp_path, monkeypatch, decision_weight, packing, numbers,
                                                      focus):
    cfg = BootstrapConfig.from_dict({**TINY, "decision_loss_weight": decision_weight, "packing": packing,
                                     "atomic_numbers": numbers, "number_copy_weight": 1.0 if numbers else 0.0,
                                     "focus": focus})  # numbers: with the number-copy loss; focus: its second batch
    clean = bc.Bootstrapper(cfg, tmp_path / "clean")
    clean.run(progress=False)

    killed = _killed_after_checkpoint(cfg, tmp_path / "killed", monkeypatch, step=4)
    assert not killed.is_done()
    killed.run(progress=False)
    a, _ = load_policy(clean.model_dir)
    b, _ = load_policy(killed.model_dir)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name
    # each run records its model's fingerprint, the same for the same weights
    recorded = [json.loads((r.dir / "bootstrap.json").read_text())["model_fingerprint"] for r in (clean, killed)]
    assert recorded[0] == recorded[1] == model_fingerprint(clean.model_dir)
    # and the same summary (final_loss_ema included) and metrics rows (loss_ema included), wall clock aside
    (clean_summary, clean_rows), (killed_summary, killed_rows) = map(_summary_and_metrics, (clean, killed))
    assert killed_summary["final_loss_ema"] == clean_summary["final_loss_ema"] is not None
    assert killed_summary == clean_summary and killed_rows == clean_rows


def test_a_bootstrap_killed_after_its_last_checkpoint_keeps_its_loss_ema(tmp_path, monkeypatch):
    """Killed after the final checkpoint but before bootstrap.json: the resume trains no step, yet reports the EMA."""
    cfg = BootstrapConfig(**{**TINY, "steps": 4})
    clean = bc.Bootstrapper(cfg, tmp_path / "clean")
    clean.run(progress=False)
    killed = _killed_after_checkpoint(cfg, tmp_path / "killed", monkeypatch, step=4)
    killed.run(progress=False)
    (clean_summary, clean_rows), (killed_summary, killed_rows) = map(_summary_and_metrics, (clean, killed))
    assert killed_summary["final_loss_ema"] == clean_summary["final_loss_ema"] is not None
    assert killed_summary == clean_summary and killed_rows == clean_rows


def test_a_bootstrap_killed_before_its_summary_finishes_on_resume(tmp_path, monkeypatch):
    """A kill after model/ is in place but before bootstrap.json: the resume republishes model/ over it."""
    cfg = BootstrapConfig(**TINY)
    real = bc.write_json_atomic

    def killed_before_summary(path, *args, **kwargs):
        if str(path).endswith("bootstrap.json"):
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(bc, "write_json_atomic", killed_before_summary)
    boot = bc.Bootstrapper(cfg, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        boot.run(progress=False)
    monkeypatch.setattr(bc, "write_json_atomic", real)
    assert (boot.model_dir / "config.json").exists() and not boot.is_done()
    summary = boot.run(progress=False)
    assert boot.is_done() and summary["model_fingerprint"] == model_fingerprint(boot.model_dir)
    assert [p.name for p in boot.dir.iterdir() if p.name.startswith(".model.")] == []  # no temp folder left


def test_continuation_runs_its_parent_first_and_sees_fresh_data(tmp_path):
    parent = {**TINY, "steps": 4}
    child = BootstrapConfig(**{**TINY, "steps": 2, "init_from": parent, "data_offset_steps": 4})
    assert batch_seeds(child, 0) == batch_seeds(BootstrapConfig(**parent), 4)
    assert child.content_hash() != BootstrapConfig(**{**TINY, "steps": 2}).content_hash()
    runner = bc.Bootstrapper(child, tmp_path)
    runner.run(progress=False)
    parent_dir = tmp_path / BootstrapConfig(**parent).content_hash()
    assert (parent_dir / "bootstrap.json").exists()
    assert json.loads((runner.dir / "bootstrap.json").read_text())["config"]["init_from"]["steps"] == 4


def test_stop_step_keeps_the_schedule_of_the_full_run():
    full = BootstrapConfig(steps=100, warmup_steps=10)
    stopped = BootstrapConfig(steps=100, warmup_steps=10, stop_step=40)
    assert stopped.last_step == 40 and bc.lr_at(full, 39) == bc.lr_at(stopped, 39)
    assert full.content_hash() != stopped.content_hash()
    assert BootstrapConfig(time_budget_min=5).content_hash() == BootstrapConfig(time_budget_min=50).content_hash()


def test_the_hash_follows_the_data_version_of_the_env(monkeypatch):
    from trace_envs.retail_sim.env import RetailSimEnv

    assert env_data_version("trace/retail-sim-v0") == RetailSimEnv.data_version
    assert env_data_version("CartPole-v1") == 1  # an env that declares no version
    before = BootstrapConfig().content_hash()
    monkeypatch.setattr(RetailSimEnv, "data_version", RetailSimEnv.data_version + 1)
    assert BootstrapConfig().content_hash() != before  # a changed episode generator retrains, not reuses


def test_copy_mask_marks_repeated_entity_ids_outside_assistant_turns():
    entity = {7: "order_id", 9: "user_id"}
    ids = [1, 7, 2, 9, 7, 9, 7, 3]
    assistant = [0, 0, 0, 0, 1, 0, 0, 0]
    # 7 first seen at 1; its repeat at 4 is an assistant target (already in the loss); 9 repeats at 5; 7 at 6.
    assert copy_mask(ids, assistant, entity) == [0, 0, 0, 0, 0, 1, 1, 0]


def test_copy_loss_adds_weighted_cross_entropy_on_copy_targets(tmp_path):
    cfg = BootstrapConfig(**{**TINY, "steps": 1, "copy_loss_weight": 0.5})
    runner = bc.Bootstrapper(cfg, tmp_path)
    runner.run(progress=False)
    model, tokenizer = load_policy(runner.model_dir)
    renderer = ChatRenderer(tokenizer)
    entity = entity_token_ids(tokenizer)
    examples = [encode(renderer, r, cfg, entity) for r in expert_episodes(cfg, [1_000_000, 1_000_001])]
    assert all(sum(e.copy_mask) >= 2 for e in examples)  # tool results echo the user id and order ids
    ids, attn, mask, copies = (torch.from_numpy(a) for a in pad_batch(examples, tokenizer.pad_token_id))
    with torch.no_grad():
        logp = model(input_ids=ids, attention_mask=attn).logits[:, :-1].log_softmax(-1)
        nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
        by_hand = nll[mask[:, 1:].bool()].mean() + 0.5 * nll[copies[:, 1:].bool()].mean()
        got = bc.masked_lm_loss(model, ids, attn, mask, copies, 0.5)
        plain = bc.masked_lm_loss(model, ids, attn, mask)
    assert torch.allclose(got, by_hand, atol=1e-5) and got > plain


def test_env_kwargs_shape_the_bc_episodes_but_not_the_probe():
    cfg = BootstrapConfig(**{**TINY, "env_kwargs": {"n_intents": 1, "kinds": ["cancel"]}})
    records = expert_episodes(cfg, [11, 12, 13])
    assert all(len(r.info["task"]["intents"]) == 1 and r.info["task"]["intents"][0]["kind"] == "cancel"
               for r in records)
    mixed = expert_episodes(cfg, list(range(11, 31)), env_kwargs={})
    assert {len(r.info["task"]["intents"]) for r in mixed} != {1}
    assert cfg.content_hash() != BootstrapConfig(**TINY).content_hash()
    assert Example([1], [0], 0).copy_mask is None


def test_a_resumed_bootstrap_logs_each_step_once(tmp_path, monkeypatch):
    cfg = BootstrapConfig(**{**TINY, "steps": 14, "checkpoint_every": 7})  # rows at steps 10 and 14
    original = bc._save_checkpoint

    def die_before_second_checkpoint(path, model, optimizer, step, elapsed, head=None, **kwargs):
        if step == 14:
            raise KeyboardInterrupt  # killed after logging steps 10 and 14, with step 7 the last checkpoint
        original(path, model, optimizer, step, elapsed, head, **kwargs)

    monkeypatch.setattr(bc, "_save_checkpoint", die_before_second_checkpoint)
    runner = bc.Bootstrapper(cfg, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        runner.run(progress=False)
    monkeypatch.setattr(bc, "_save_checkpoint", original)
    logged = [json.loads(line)["step"] for line in (runner.dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == [10, 14]
    runner.run(progress=False)  # resumes at step 7 and replays 8..14, logging 10 and 14 again
    logged = [json.loads(line)["step"] for line in (runner.dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == [10, 14]
