"""Hint injection (paper §3.5): hinted members, the family hints, the prompt swap before the update."""

import hashlib

import gymnasium as gym
import pytest
import torch
from grpo_configs import small_grpo_config

import trace_envs  # noqa: F401
import trace_train.grpo.trainer as trainer_module
from trace_envs.families import FAMILIES
from trace_envs.hints import HINT_OPEN, with_hint
from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.hints import TrainingSequence, training_sequence
from trace_train.grpo.seeds import hinted_members, plan_iteration
from trace_train.grpo.update import Sample, sequence_logprobs
from trace_train.model.factory import load_policy
from trace_train.paths import REPO_ROOT
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.trajectory import read_trajectories

torch.set_num_threads(1)

SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"
PRECONDITION = "trace/precondition_verification-v0"


@pytest.mark.parametrize("fraction,group", [(0.25, 16), (0.5, 16), (0.375, 8), (0.5, 4), (1.0, 4)])
def test_hinted_members_are_the_fraction_drawn_from_the_seed(fraction, group):
    draws = [hinted_members(7, 2, g, group, fraction) for g in range(12)]
    for members in draws:
        assert len(members) == round(fraction * group)
        assert list(members) == sorted(set(members)) and all(0 <= m < group for m in members)
    assert draws == [hinted_members(7, 2, g, group, fraction) for g in range(12)]  # a pure function of the seed
    if 0 < fraction < 1:
        assert len(set(draws)) > 1  # not the same members in every group
        other_seed = [hinted_members(8, 2, g, group, fraction) for g in range(12)]
        assert other_seed != draws


def test_zero_fraction_hints_nobody_and_bad_fractions_fail():
    assert hinted_members(0, 0, 0, 16, 0.0) == ()
    assert all(g.hinted == () for g in plan_iteration(0, 0, 4, 8, {PRECONDITION: 1.0}))
    with pytest.raises(ValueError, match="hint fraction"):
        hinted_members(0, 0, 0, 16, 1.5)
    with pytest.raises(ValueError, match="hint_fraction"):
        GRPOConfig(hint_fraction=-0.1).validate()


@pytest.mark.parametrize("fraction,group", [(0.25, 2), (0.5, 5), (0.3, 8)])
def test_a_fraction_that_is_not_a_whole_number_of_members_is_refused(fraction, group):
    from trace_envs.synthesis import SynthesisConfig

    # 0.25 of 2 used to hint nobody while the run claimed hints; 0.5 of 5 hinted 2 (banker's rounding)
    with pytest.raises(ValueError, match=rf"hint_fraction={fraction} of a group of {group}"):
        GRPOConfig(hint_fraction=fraction, group_size=group).validate()
    with pytest.raises(ValueError, match=rf"synthesis.hint_fraction={fraction} of a group of {group}"):
        SynthesisConfig(hint_fraction=fraction, group_size=group)
    with pytest.raises(ValueError, match="whole number of members"):
        hinted_members(0, 0, 0, group, fraction)
    GRPOConfig(hint_fraction=0.5, group_size=6).validate()  # 3 of 6
    assert len(hinted_members(0, 0, 0, 6, 0.5)) == 3


@pytest.mark.parametrize("capability", sorted(FAMILIES))
def test_a_family_hint_changes_only_the_system_prompt_and_never_gives_the_call(capability):
    env = gym.make(f"trace/{capability}-v0")
    for seed in range(5):
        obs_h, info_h = env.reset(seed=seed, options={"hint": True})
        obs, info = env.reset(seed=seed)
        assert obs_h == obs and info_h["task"] == info["task"] and info_h["tools"] == info["tools"]
        assert info["hint"] is None and info_h["hint"] and info_h["hint_capability"] == capability
        assert info["system_prompt"] == info["unhinted_system_prompt"] == info_h["unhinted_system_prompt"]
        assert info_h["system_prompt"] == with_hint(info["system_prompt"], info_h["hint"])
        hint = info_h["hint"]
        assert not any(t["function"]["name"] in hint for t in info["tools"])  # no tool call
        gold_values = {str(v) for _, args in info["task"]["gold"]["actions"] for v in args.values()}
        assert not any(v in hint for v in gold_values if len(v) > 3)  # no argument of the answer
    with pytest.raises(ValueError, match="must be a bool"):
        env.reset(seed=0, options={"hint": "yes"})


@pytest.fixture(scope="module")
def shipped():
    return load_policy(SHIPPED)


_config = small_grpo_config


def _train_capturing(tmp_path, shipped, cfg, monkeypatch):
    model, tok = load_policy(SHIPPED)  # a fresh copy: the trainer attaches an adapter to it
    calls = []
    real = trainer_module.optimize

    def capture(model_, optimizer, params, samples, cfg_, iteration, old_lps, ref_lps, pad_id=0, scale=1.0):
        calls.append(([list(s.token_ids) for s in samples], [list(s.loss_mask) for s in samples],
                      None if old_lps is None else [t.clone() for t in old_lps],
                      [s.sampler_logprobs for s in samples]))
        return real(model_, optimizer, params, samples, cfg_, iteration, old_lps, ref_lps, pad_id, scale)

    monkeypatch.setattr(trainer_module, "optimize", capture)
    trainer = GRPOTrainer(model, lambda m: HFRolloutBackend(m, tok, max_turns=8), cfg, env=PRECONDITION,
                          adapter="cap", output_dir=tmp_path)
    result = trainer.train()
    return trainer, result, calls, read_trajectories(tmp_path / "rollouts" / "iter_0000.jsonl"), tok


def test_the_update_batch_holds_the_unhinted_prompt(tmp_path, shipped, monkeypatch):
    cfg = _config(hint_fraction=0.5)
    _, result, calls, records, tok = _train_capturing(tmp_path, shipped, cfg, monkeypatch)
    plan = plan_iteration(cfg.seed, 0, cfg.groups_per_iter, cfg.group_size, {PRECONDITION: 1.0}, 0.5)
    hinted_flags = [bool(r.info.get("hint")) for r in records]
    assert hinted_flags == [m in g.hinted for g in plan for m in range(cfg.group_size)]
    assert sum(hinted_flags) == 4  # exactly the fraction: 2 of 4 in each group
    for rec in records:
        assert (HINT_OPEN in rec.messages[0]["content"]) == bool(rec.info.get("hint"))  # what the policy saw
    (ids, masks, _, sampler_lps), = calls
    assert ids, "the iteration trained nothing; pick a seed with an informative group"
    # every trained sequence is a record's sequence, swapped when hinted; a hinted member that ignored its hint
    # trains the same ids as an unhinted one, so pick among equal sequences by the hint (no sampler log-probs)
    expected: dict[tuple[int, ...], list] = {}
    for r in records:
        expected.setdefault(tuple(training_sequence(r).token_ids), []).append(r)
    guidance = tok.encode(HINT_OPEN, add_special_tokens=False)
    n_hinted = 0
    for seq, mask, lps in zip(ids, masks, sampler_lps):
        rec = next(r for r in expected[tuple(seq)] if bool(r.info.get("hint")) == (lps is None))
        expected[tuple(seq)].remove(rec)
        text = tok.decode(seq, skip_special_tokens=False)
        assert HINT_OPEN not in text
        if rec.info.get("hint"):
            n_hinted += 1
            hint = rec.info["hint"]
            assert hint["text"] not in text
            plain, n = hint["unhinted_prompt_ids"], hint["hinted_prompt_len"]
            assert seq == plain + rec.token_ids[n:] and mask == [0.0] * len(plain) + rec.loss_mask[n:]
            assert lps is None  # the sampler's log-probs belong to the hinted prompt
        else:
            assert seq == rec.token_ids and lps == rec.logprobs
        assert not any(seq[i:i + len(guidance)] == guidance for i in range(len(seq)))
    assert n_hinted > 0
    row = result.history[0]
    assert row["hinted_records"] == 4
    hinted_success = [r.success for r in records if r.info.get("hint")]
    assert row["success_rate_hinted"] == pytest.approx(sum(hinted_success) / 4)
    assert row["success_rate_unhinted"] == pytest.approx(sum(r.success for r in records if not r.info.get("hint")) / 4)
    assert isinstance(row["hint_logprob_shift"], float)


def test_hinted_old_logprobs_are_recomputed_under_the_unhinted_prompt(tmp_path, shipped, monkeypatch):
    cfg = _config(hint_fraction=0.5, old_logprobs="sampler")
    trainer, _, calls, records, _ = _train_capturing(tmp_path, shipped, cfg, monkeypatch)
    (ids, masks, old_lps, sampler_lps), = calls
    base_model, _ = load_policy(SHIPPED)  # the adapter starts at zero (B = 0): the base is the old policy
    checked = 0
    for seq, mask, old, lps in zip(ids, masks, old_lps, sampler_lps):
        if lps is None:  # hinted
            fresh, = sequence_logprobs(base_model, [Sample(seq, mask)], 4, cfg.temperature)
            sel = torch.tensor(mask, dtype=torch.bool)
            sel[0] = False
            assert torch.allclose(old[sel], fresh[sel], atol=1e-5)
            checked += 1
        else:
            assert torch.equal(old, torch.tensor(lps, dtype=torch.float32))
    assert checked > 0


# hint_fraction = 0 must train exactly what a trainer without hint injection trains. Measured once against the real
# thing (session 27): the trainer at 39aff78 (before hint injection) and at eb6dfed (the commit that landed it,
# fraction 0), each with its sampler seeded as today, gave the same adapter bit for bit on the shipped base at seed 4
# (both groups mixed, so a real update). Until session 28 this test pinned today's adapter by its sha256
# (0f342ba2..., measured on session 27's box and passing in CI); on session 28's box (AVX512, torch 2.13.0 CPU) the
# same commit gives 01607d7c...: an adapter's bits depend on the machine's kernels, so a hash pin tests the machine.
# The test now compares, on whatever machine runs it, the trainer at fraction 0 with the same trainer whose hint
# path is cut out (every record's own ids, mask and sampler log-probs; no hinted member can reach the update).


def _without_hints(record):
    """What the update saw before hint injection existed: the record's own sequence, never a swapped one."""
    assert not (record.info or {}).get("hint"), "a hinted member at hint_fraction 0"
    lps = None if record.logprobs is None else [float(x) for x in record.logprobs]
    return TrainingSequence(list(record.token_ids), [float(x) for x in record.loss_mask], lps, hinted=False)


def test_zero_fraction_trains_what_the_trainer_without_hints_trains_bit_for_bit(tmp_path, shipped, monkeypatch):
    # the padded update that commit had; seed 6 mixes both groups on the shipped base under session 43's verifiers
    # (seed 2 did before them, seed 4 on the base shipped before session 33)
    cfg = _config(iterations=1, checkpoint_every=1, packing="none", seed=6)
    _, result, calls, records, _ = _train_capturing(tmp_path / "fraction0", shipped, cfg, monkeypatch)
    for group in (records[:4], records[4:]):  # both groups mixed: the adapter holds a real update
        assert len({r.reward for r in group}) > 1, [r.reward for r in group]
    assert calls and calls[0][0]

    monkeypatch.setattr(trainer_module, "training_sequence", _without_hints)
    monkeypatch.setattr(trainer_module, "_hint_logprob_shift", lambda *a: pytest.fail("hint metric at fraction 0"))
    _, plain, plain_calls, plain_records, _ = _train_capturing(tmp_path / "no_hints", shipped, cfg, monkeypatch)
    assert [r.token_ids for r in plain_records] == [r.token_ids for r in records]
    assert plain_calls[0][:2] == calls[0][:2]  # the same ids and masks reached the update

    def digest(run) -> str:
        return hashlib.sha256((run.adapter_dir / "adapter_model.safetensors").read_bytes()).hexdigest()

    assert digest(result) == digest(plain)


def test_hints_on_an_env_without_one_fail_before_any_work(tmp_path, shipped):
    model, tok = load_policy(SHIPPED)
    from grpo_toy import ENV_ID  # a toy env without hints

    with pytest.raises(ValueError, match="does not support hints"):
        GRPOTrainer(model, lambda m: HFRolloutBackend(m, tok), _config(hint_fraction=0.5), env=ENV_ID,
                    adapter="cap", output_dir=tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_the_openai_backend_records_the_same_hint_swap_as_hf(shipped):
    from tests.rollout_openai.fake_server import FakeOpenAIServer
    from trace_train.rollout import EpisodeRequest, SamplingParams
    from trace_train.rollout.openai_backend import OpenAIRolloutBackend

    model, tok = shipped
    reqs = [EpisodeRequest(PRECONDITION, seed=s, sample_seed=s, hint=h) for s in (1, 2) for h in (True, False)]
    sampling = SamplingParams(max_new_tokens=48, greedy=True)
    hf = HFRolloutBackend(model, tok, max_turns=3, policy_name="p").rollout(reqs, sampling)
    with FakeOpenAIServer(model, tok) as srv:
        served = OpenAIRolloutBackend([srv.base_url], "tiny", tok, max_turns=3, policy_name="p").rollout(reqs, sampling)
    for a, b, req in zip(served, hf, reqs):
        assert a.info.get("hint") == b.info.get("hint") and bool(a.info.get("hint")) == req.hint
        assert a.token_ids == b.token_ids
        if req.hint:
            assert training_sequence(a).token_ids == training_sequence(b).token_ids


def test_envs_without_hints_names_exactly_the_envs_that_have_none():
    from grpo_toy import ENV_ID  # a toy env without hints

    from trace_envs.hints import envs_without_hints

    assert envs_without_hints([PRECONDITION, ENV_ID, "trace/multi_step_task_completion-v0"], {}) == [ENV_ID]
    assert envs_without_hints([PRECONDITION], {}) == []


def test_the_gates_train_on_hinted_successes_under_the_unhinted_prompt(tmp_path, shipped):
    """The compose stage's gate examples come from the GRPO runs' successful rollouts; a hinted one is taken as
    the update takes it (the composed model never sees a hint, and the hint would name the env outright)."""
    from dataclasses import replace

    from trace_envs.records import write_trajectories
    from trace_train.pipeline.stages import gate_examples
    from trace_train.rollout import EpisodeRequest, SamplingParams

    model, tok = shipped
    requests = [EpisodeRequest(PRECONDITION, seed=s, sample_seed=s, hint=s % 2 == 0) for s in range(4)]
    records = HFRolloutBackend(model, tok, max_turns=4).rollout(requests, SamplingParams(max_new_tokens=48))
    records = [replace(r, success=True) for r in records]  # the stage keeps successful rollouts only
    adapter_dir = tmp_path / "adapters" / "precondition_verification" / "v0001"
    adapter_dir.mkdir(parents=True)
    write_trajectories(tmp_path / "rollouts" / "iter_0000.jsonl", records)
    examples = gate_examples({"precondition_verification": {"adapter_dir": str(adapter_dir)}},
                             ["base", "precondition_verification"], 10)
    assert len(examples) == 4 and sum(bool(r.info.get("hint")) for r in records) == 2
    for example, record in zip(examples, records):
        assert HINT_OPEN not in tok.decode(example.input_ids, skip_special_tokens=False)
        sequence = training_sequence(record)
        assert example.input_ids == sequence.token_ids and example.loss_mask == [int(m) for m in sequence.loss_mask]
        assert example.label == 1
        if not record.info.get("hint"):
            assert example.input_ids == record.token_ids
