"""``grpo_vs_trl.py --multi-turn``: our GRPO vs TRL's ``GRPOTrainer`` on a multi-turn text env.

Both train the shipped base (``checkpoints/retail-sim-tiny``) with the same LoRA, G, groups per step,
max new tokens per turn, one optimizer step per generation batch and β = 0 on
``trace/precondition_verification-v0``. Ours: ``GRPOTrainer`` + the ``hf`` rollout backend (batched
turns, cross-turn KV caches, prefix sharing). TRL: ``rollout_func`` plays the same env with a plain
batched multi-turn loop on ``trainer.model.generate`` (one call per turn over the live episodes, the
observations tokenized with the same chat renderer) and returns prompt_ids, completion_ids, logprobs
and env_mask (1 on sampled tokens); the env reward reaches TRL's reward function as an extra field.

What TRL cannot express: ``environment_factory`` wants tool methods on an env object and a
single-conversation tool loop, not a gym ``step(text)`` env that returns user turns and a terminal
reward, so the env goes through ``rollout_func``; sampling uses the global torch RNG, so per-member
seeded samplers (our reproducible episodes) cannot be expressed, and episodes differ between the two.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ENV_ID = "trace/precondition_verification-v0"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def run_ours(args, workdir: Path) -> float:
    from trace_train.grpo import GRPOConfig, GRPOTrainer
    from trace_train.grpo.lora import LoraSettings
    from trace_train.model.factory import load_policy
    from trace_train.rollout.hf import HFRolloutBackend

    model, tok = load_policy(args.checkpoint)
    cfg = GRPOConfig(iterations=args.steps, groups_per_iter=args.groups, group_size=args.group_size, lr=1e-4,
                     micro_batch_size=args.groups * args.group_size, max_new_tokens=args.tokens,
                     checkpoint_every=10**6, threads=1, tensorboard=False, progress=False,
                     lora=LoraSettings(r=8, alpha=16, target_modules=LORA_TARGETS))
    trainer = GRPOTrainer(model, lambda m: HFRolloutBackend(m, tok, threads=1, render_tools=False), cfg,
                          env=ENV_ID, adapter="bench", output_dir=workdir / "ours",
                          pad_id=tok.pad_token_id or 0)
    times = []
    for it in range(args.steps):
        t0 = time.perf_counter()
        trainer.run_iteration(it)
        times.append(time.perf_counter() - t0)
    return args.groups * args.group_size / float(np.mean(times[1:]))


class EnvRollout:
    """TRL ``rollout_func``: plays each prompt's env seed G times, one ``generate`` per turn."""

    def __init__(self, tok, group_size: int, tokens: int, max_turns: int = 30) -> None:
        from trace_train.model.rendering import ChatRenderer

        self.renderer, self.tok, self.g, self.tokens, self.max_turns = ChatRenderer(tok), tok, group_size, tokens, \
            max_turns

    @torch.no_grad()
    def __call__(self, prompts: list[Any], trainer) -> dict[str, list]:
        import gymnasium as gym

        import trace_envs  # noqa: F401

        seeds = [int(re.search(r"seed (\d+)", p if isinstance(p, str) else str(p)).group(1)) for p in prompts]
        # TRL's sampler may already repeat each prompt G times; else this returns G completions per prompt.
        per = 1 if len(prompts) >= trainer.args.per_device_train_batch_size else self.g
        eps = []
        for seed in seeds:
            for _ in range(per):
                env = gym.make(ENV_ID)
                obs, info = env.reset(seed=seed)
                msgs = [{"role": "system", "content": info["system_prompt"]}, *obs]
                ids = self.renderer.prompt_ids(msgs, None)
                eps.append({"env": env, "msgs": msgs, "prompt": ids, "comp": [], "lp": [], "mask": [],
                            "reward": 0.0, "done": False, "turns": 0})
        model = trainer.model
        was = model.training
        model.eval()
        end = self.renderer.end_id
        while any(not e["done"] for e in eps):
            live = [e for e in eps if not e["done"]]
            seqs = [e["prompt"] + e["comp"] for e in live]
            width = max(map(len, seqs))
            pad = self.tok.pad_token_id or 0
            inp = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
            att = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
            out = model.generate(input_ids=inp, attention_mask=att, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=self.tokens, eos_token_id=end, pad_token_id=pad,
                                 output_logits=True, return_dict_in_generate=True)
            new = out.sequences[:, width:]
            lps = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
            for row, e in enumerate(live):
                ids = new[row].tolist()
                n = ids.index(end) + 1 if end in ids else len(ids)
                ids = ids[:n]
                e["comp"] += ids
                e["lp"] += lps[row, :n].tolist()
                e["mask"] += [1] * n
                if ids[-1] != end:
                    e["comp"].append(end)
                    e["lp"].append(0.0)
                    e["mask"].append(0)
                text = self.renderer.decode(ids[:-1] if ids[-1] == end else ids)
                e["msgs"].append({"role": "assistant", "content": text})
                obs, reward, term, trunc, _ = e["env"].step(text)
                e["reward"] += float(reward)
                e["turns"] += 1
                if term or trunc or e["turns"] >= self.max_turns:
                    e["done"] = True
                    continue
                delta = self.renderer.observation_delta_ids(e["msgs"], list(obs), None)
                e["msgs"].extend(obs)
                e["comp"] += delta
                e["lp"] += [0.0] * len(delta)
                e["mask"] += [0] * len(delta)
        model.train(was)
        return {"prompt_ids": [e["prompt"] for e in eps], "completion_ids": [e["comp"] for e in eps],
                "logprobs": [e["lp"] for e in eps], "env_mask": [e["mask"] for e in eps],
                "env_reward": [e["reward"] for e in eps]}


def run_trl(args, workdir: Path) -> float:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    from trace_train.model.factory import load_policy

    model, tok = load_policy(args.checkpoint)
    n = args.groups * args.group_size
    prompts = [f"seed {1000 + i}" for i in range(args.groups * args.steps * 2)]
    targs = TRLConfig(output_dir=str(workdir / "trl"), per_device_train_batch_size=n, num_generations=args.group_size,
                      max_completion_length=4096, learning_rate=1e-4, max_steps=args.steps, beta=0.0,
                      temperature=1.0, top_k=0, loss_type="bnpo", report_to="none", use_cpu=True, bf16=False,
                      save_strategy="no", logging_steps=args.steps, disable_tqdm=True, seed=0,
                      lr_scheduler_type="constant")
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    def reward(completions, env_reward, **_):
        return list(env_reward)

    trainer = TRLTrainer(model=model, reward_funcs=reward, args=targs,
                         train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok,
                         callbacks=[Timer()], rollout_func=EnvRollout(tok, args.group_size, args.tokens),
                         peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"))
    trainer.train()
    return n / float(np.mean(times[1:]))


def main(args) -> None:
    import tempfile

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        ours = run_ours(args, Path(tmp))
        trl_sps = run_trl(args, Path(tmp))
    print(f"setup: {ENV_ID}, {args.checkpoint}, {args.groups} groups x G={args.group_size}, {args.tokens} max new "
          f"tokens per turn, {args.steps} steps (first excluded), LoRA r 8 on q/k/v/o")
    print(f"ours: {ours:8.2f} samples/s")
    print(f"TRL : {trl_sps:8.2f} samples/s   (rollout_func, plain per-turn generate)")
    print(f"ratio ours/TRL: {ours / trl_sps:.2f}")
    print("TRL cannot express: text-step gym envs through environment_factory (used rollout_func instead); "
          "per-member seeded samplers (TRL samples from the global RNG), so the two runs' episodes differ.")
