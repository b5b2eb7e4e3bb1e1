"""TRL's GRPOTrainer trains on a trace/* env through ``trace_train.integrations.trl_rollout``.

Real trl, the shipped tiny base, ``trace/precondition_verification-v0`` (multi-turn: the user answers
between policy turns), 2 env seeds x G = 2, one optimizer step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trace_envs  # noqa: F401  (registers the envs)
from trace_train.integrations.trl_rollout import (
    TraceEnvRollout,
    env_reward,
    env_seed_from_prompt,
    records_to_trl,
    seed_prompts,
)
from trace_train.model.factory import load_policy
from trace_train.paths import shipped_checkpoint
from trace_train.rollout.base import SamplingParams
from trace_train.rollout.hf import HFRolloutBackend

torch.set_num_threads(1)
ENV_ID = "trace/precondition_verification-v0"
BACKEND = {"threads": 1, "render_tools": False, "max_turns": 3}


class _Trainer:
    """What the adapter reads from a TRL trainer (model, args, state, processing_class)."""

    def __init__(self, model, tok, step=0, seed=0):
        self.model, self.processing_class = model, tok
        self.args = type("Args", (), {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None,
                                      "repetition_penalty": 1.0, "seed": seed})()
        self.state = type("State", (), {"global_step": step})()


def test_adapter_output_is_the_env_rollout_split_at_the_first_sampled_token():
    model, tok = load_policy(shipped_checkpoint())
    rollout = TraceEnvRollout(ENV_ID, max_new_tokens=24, backend_kwargs=BACKEND)
    prompts = [p for p in seed_prompts([4, 9]) for _ in range(2)]
    out = rollout(prompts, _Trainer(model, tok))
    records = rollout.last_records
    assert len(records) == 4 and [r.seed for r in records] == [4, 4, 9, 9]
    assert set(out) >= {"prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward"}
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "env_seed"):
        assert len(out[key]) == 4, key
    for i, rec in enumerate(records):
        p, c, m, lp = out["prompt_ids"][i], out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert p + c == rec.token_ids and [0] * len(p) + m == rec.loss_mask
        assert m[0] == 1 and len(lp) == len(c) and all(x == 0.0 for x, k in zip(lp, m) if not k)
        sampled = [x for x, k in zip(lp, m) if k]  # the sampler's log-probs on sampled tokens
        assert all(x <= 0 for x in sampled) and any(x < -1e-3 for x in sampled)
        assert out["env_reward"][i] == rec.reward and out["env_seed"][i] == rec.seed
    # repeated prompts are the members of one group: the same env seed, each its own sampler seed
    requests = rollout.requests(prompts, 0, 0)
    assert [q.group for q in requests] == [0, 0, 1, 1] and len({q.sample_seed for q in requests}) == 4
    assert {q.sample_seed for q in requests}.isdisjoint(q.sample_seed for q in rollout.requests(prompts, 1, 0))
    # the same (seed, step) plays the same episodes; the episodes are the hf backend's for those requests
    again = rollout(prompts, _Trainer(model, tok))
    assert again["completion_ids"] == out["completion_ids"]
    direct = HFRolloutBackend(model, tok, **BACKEND).rollout(requests, SamplingParams(max_new_tokens=24))
    assert records_to_trl(direct) == out


def test_an_episode_whose_env_fails_at_reset_keeps_the_batch_trainable():
    """An env that raises at reset ends its episode with no tokens (``env_error``); TRL must still get integer
    token lists of at least one token, the completion masked out."""
    from trace_train.trajectory import TrajectoryRecord

    model, tok = load_policy(shipped_checkpoint())
    rollout = TraceEnvRollout("trace/retail-sim-v0", env_kwargs={"n_intents": 1}, max_new_tokens=8,
                              backend_kwargs={**BACKEND, "env_factory": _reset_fails_on_seed(3)})
    out = rollout(seed_prompts([3, 4]), _Trainer(model, tok))
    assert rollout.last_records[0].termination == "env_error" and rollout.last_records[0].token_ids == []
    assert out["prompt_ids"][0] == [tok.pad_token_id] and out["completion_ids"][0] == [tok.pad_token_id]
    assert out["env_mask"][0] == [0] and out["logprobs"][0] == [0.0] and out["env_reward"][0] == 0.0
    assert out["env_mask"][1][0] == 1  # the other episode is played as usual
    for key in ("prompt_ids", "completion_ids"):  # what TRL pads: integer tensors, never empty
        assert all(len(ids) >= 1 and torch.tensor(ids).dtype == torch.long for ids in out[key])
    one = TrajectoryRecord(env_id="e", seed=1, messages=[], reward=0.0, success=False, termination="env_error",
                           token_ids=[7], loss_mask=[0], logprobs=[0.0])
    assert records_to_trl([one], filler_id=5)["prompt_ids"] == [[5]]
    assert records_to_trl([one], filler_id=5)["completion_ids"] == [[7]]


def _reset_fails_on_seed(bad_seed):
    import gymnasium

    class _Failing(gymnasium.Wrapper):
        def reset(self, *, seed=None, options=None):
            if seed == bad_seed:
                raise RuntimeError("the env could not start")
            return self.env.reset(seed=seed, options=options)

    return lambda env_id, **kwargs: _Failing(gymnasium.make(env_id, **kwargs))


def test_adapter_refuses_what_it_cannot_play():
    with pytest.raises(ValueError, match="names no env seed"):
        env_seed_from_prompt("hello")
    assert env_seed_from_prompt([{"role": "user", "content": "trace env seed 12"}]) == 12
    rollout = TraceEnvRollout(ENV_ID)
    trainer = _Trainer(None, None)
    trainer.args.top_k = 50
    with pytest.raises(ValueError, match="top_k=50"):
        rollout(seed_prompts([1]), trainer)
    with pytest.raises(Exception, match="nope/none-v0"):
        TraceEnvRollout("nope/none-v0")


def test_trl_grpo_trainer_trains_on_the_env_rollouts(tmp_path):
    trl = pytest.importorskip("trl", reason="trl (the dev extra) is not importable")
    from datasets import Dataset
    from peft import LoraConfig

    model, tok = load_policy(shipped_checkpoint())
    # whole episodes on two env seeds whose two members (sampler seeds of run seed 0, step 0) disagree
    rollout = TraceEnvRollout(ENV_ID, max_new_tokens=96, backend_kwargs={"threads": 1, "render_tools": False})
    seen: dict = {"prompts": [], "rewards": []}
    real_call = rollout.__call__

    class Spy:  # TRL calls rollout_func(prompts, trainer)
        def __call__(self, prompts, trainer):
            seen["prompts"].append(list(prompts))
            return real_call(prompts, trainer)

    def reward(completions, **kw):
        values = env_reward(completions, **kw)
        seen["rewards"].append(values)
        return values

    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=4096, learning_rate=1e-3, max_steps=1, beta=0.0, temperature=1.0,
                          top_k=0, loss_type="bnpo", report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                          logging_steps=1, disable_tqdm=True, seed=0, lr_scheduler_type="constant")
    trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                              train_dataset=Dataset.from_dict({"prompt": seed_prompts([113, 133])}),
                              rollout_func=Spy(), peft_config=LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                                         target_modules=["q_proj", "v_proj"]))
    scored = []
    real_score = trainer._generate_and_score_completions

    def score(inputs):
        out = real_score(inputs)
        scored.append(out)
        return out

    trainer._generate_and_score_completions = score
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()

    assert len(seen["prompts"]) == 1 and len(scored) == 1
    prompts, records, out = seen["prompts"][0], rollout.last_records, scored[0]
    seeds = [env_seed_from_prompt(p) for p in prompts]
    assert len(seeds) == 4 and seeds[0] == seeds[1] and seeds[2] == seeds[3]  # TRL repeats a prompt G times
    assert [r.seed for r in records] == seeds
    assert any(sum(m["role"] == "assistant" for m in r.messages) > 1 for r in records)  # multi-turn episodes
    # the completion ids and the loss mask TRL trains on are the env rollout's
    cmask, tmask = out["completion_mask"], out["tool_mask"]
    observation_tokens, observations_found = 0, 0
    for i, rec in enumerate(records):
        start = rec.loss_mask.index(1)
        n = int(cmask[i].sum())
        assert out["completion_ids"][i, :n].tolist() == rec.token_ids[start:]
        assert (out["prompt_ids"][i][out["prompt_mask"][i].bool()]).tolist() == rec.token_ids[:start]
        assert tmask[i, :n].tolist() == rec.loss_mask[start:]
        masked = [t for t, k in zip(rec.token_ids[start:], rec.loss_mask[start:]) if not k]
        observation_tokens += len(masked)
        between = [m["content"] for m in rec.messages[2:-1] if m["role"] in ("user", "tool")]  # env turns in the stream
        for text in between:
            assert text.strip() in tok.decode(masked)  # they reach TRL masked out
            observations_found += 1
    assert observation_tokens > 0 and observations_found > 0
    # the rewards are the env rewards, and TRL's advantages are normalized within each env seed's group
    env_rewards = [float(r.reward) for r in records]
    assert seen["rewards"] == [env_rewards]
    r = np.asarray(env_rewards).reshape(2, 2)
    expected = ((r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()
    assert np.allclose(out["advantages"].numpy(), expected, atol=1e-5)
    logged = next(h for h in trainer.state.log_history if "reward" in h)
    assert logged["reward"] == pytest.approx(float(np.mean(env_rewards)), abs=1e-6)
    assert trainer.state.global_step == 1
    assert sorted(env_rewards) == [0.0, 0.0, 1.0, 1.0] and (expected != 0).all(), (
        f"rewards {env_rewards}: pick env seeds whose members disagree (the shipped base changed?)")
    after = {n: p.detach() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert any(not torch.equal(lora_before[n], after[n]) for n in after)  # the step moved the adapter
