"""``grpo_vs_trl.py --multi-turn``: our GRPO vs TRL's ``GRPOTrainer`` on a multi-turn text env.

Both train the shipped base (``checkpoints/retail-sim-tiny``) with the same LoRA, G, groups per step,
max new tokens per turn, one optimizer step per generation batch and β = 0 on
``trace/precondition_verification-v0``. Ours: ``GRPOTrainer`` + the ``hf`` rollout backend (batched
turns, cross-turn KV caches, prefix sharing). TRL: its ``rollout_func`` is the library adapter
``trace_train.integrations.trl_rollout.TraceEnvRollout``, which plays the env with the same ``hf``
rollout backend on ``trainer.model`` (per-member seeded samplers) and returns prompt_ids,
completion_ids, logprobs and env_mask (1 on sampled tokens); the env reward reaches TRL's reward
function as the ``env_reward`` field. Both sides therefore roll out with the same engine and the ratio
measures the trainers (planning, log-probs, loss, update, bookkeeping); before the adapter moved into
the library, TRL's side rolled out with a plain per-turn ``trainer.model.generate`` loop instead.

What TRL cannot express: ``environment_factory`` wants tool methods on an env object and a
single-conversation tool loop, not a gym ``step(text)`` env that returns user turns and a terminal
reward, so the env goes through ``rollout_func``. The two runs draw different env seeds (TRL's
sampler shuffles the dataset) and sampler seeds, so their episodes differ; each run alone repeats its
own episodes exactly.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

ENV_ID = "trace/precondition_verification-v0"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def step_timer(times: list[float]):
    """A TRL/transformers callback appending each optimizer step's wall time to ``times``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    return StepTimer()


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
    times, metrics = [], []
    for it in range(args.steps):
        t0 = time.perf_counter()
        metrics.append(trainer.run_iteration(it))
        times.append(time.perf_counter() - t0)
    print_split(metrics[1:])
    return args.groups * args.group_size / float(np.mean(times[1:]))


SPLIT = (("rollout", "time_rollout_s"), ("env inside the rollout", "time_env_s"),
         ("old log-probs", "time_logprobs_s"), ("update step", "time_step_s"))


def print_split(metrics: list[dict]) -> None:
    """Our GRPO iteration's split (mean seconds over the timed iterations) from the trainer's own metrics."""
    parts = [f"{label} {np.mean([m[key] or 0.0 for m in metrics]):.2f} s" for label, key in SPLIT]
    print(f"ours, per iteration: {', '.join(parts)}")


def run_trl(args, workdir: Path) -> float:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    from trace_train.integrations.trl_rollout import TraceEnvRollout, env_reward, seed_prompts
    from trace_train.model.factory import load_policy

    model, tok = load_policy(args.checkpoint)
    n = args.groups * args.group_size
    prompts = seed_prompts(range(1000, 1000 + args.groups * args.steps * 2))
    targs = TRLConfig(output_dir=str(workdir / "trl"), per_device_train_batch_size=n, num_generations=args.group_size,
                      max_completion_length=4096, learning_rate=1e-4, max_steps=args.steps, beta=0.0,
                      temperature=1.0, top_k=0, loss_type="bnpo", report_to="none", use_cpu=True, bf16=False,
                      save_strategy="no", logging_steps=args.steps, disable_tqdm=True, seed=0,
                      lr_scheduler_type="constant")
    times: list[float] = []

    rollout = TraceEnvRollout(ENV_ID, max_new_tokens=args.tokens, backend_kwargs={"threads": 1, "render_tools": False})
    trainer = TRLTrainer(model=model, reward_funcs=env_reward, args=targs,
                         train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok,
                         callbacks=[step_timer(times)], rollout_func=rollout,
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
    print(f"TRL : {trl_sps:8.2f} samples/s   (rollout_func = trace_train.integrations.trl_rollout, same hf engine)")
    print(f"ratio ours/TRL: {ours / trl_sps:.2f}")
    print("TRL cannot express: text-step gym envs through environment_factory (used rollout_func instead); "
          "the two runs draw different env and sampler seeds, so their episodes differ.")
