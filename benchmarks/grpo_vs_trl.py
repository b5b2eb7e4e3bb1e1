"""Throughput of our GRPO trainer vs TRL's ``GRPOTrainer`` on the same tiny model and task.

Task (single turn): the prompt is ``[BOS, target]``; reward = fraction of the completion tokens equal
to the target. Both trainers use the same randomly initialised tiny Qwen3 + LoRA (r 8 on q/k/v/o),
the same group size, groups per step, completion length (exactly ``--tokens`` new tokens: EOS is
disabled through ``min_new_tokens``), one optimizer step per generation batch, β = 0, one thread,
and the same ``transformers`` ``generate`` call for sampling. Prints samples/s of each and the
ratio ours/TRL (first step of each excluded as warm-up).

    .venv/bin/python benchmarks/grpo_vs_trl.py [--steps 6 --groups 4 --group-size 8 --tokens 16]
    .venv/bin/python benchmarks/grpo_vs_trl.py --multi-turn --steps 3 --groups 2 --group-size 8 --tokens 96
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from trace_train.grpo import GRPOConfig, GRPOTrainer
from trace_train.grpo.lora import LoraSettings
from trace_train.paths import shipped_checkpoint
from trace_train.rollout.base import SamplingParams
from trace_train.trajectory import TrajectoryRecord

VOCAB, BOS, TARGETS = 64, 1, tuple(range(3, 11))
ENV_ID = "bench/TargetToken-v0"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


class TargetTokenEnv(gym.Env):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Discrete(VOCAB)
        self.action_space = gym.spaces.Sequence(gym.spaces.Discrete(VOCAB))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = int(self.np_random.choice(TARGETS))
        return self.target, {}

    def step(self, action):
        return self.target, float(np.mean([t == self.target for t in action])), True, False, {}


def build_model(seed: int = 0) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=2,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(cfg).eval()


class GenerateBackend:
    """Single-turn backend: one batched ``model.generate`` per rollout call (as TRL does)."""

    def __init__(self, model_ref, tokens: int) -> None:
        self.model_ref, self.tokens = model_ref, tokens

    @torch.no_grad()
    def rollout(self, requests, sampling: SamplingParams, adapter=None):
        model = self.model_ref()
        envs = [gym.make(r.env_id) for r in requests]
        targets = [env.reset(seed=r.seed)[0] for env, r in zip(envs, requests)]
        prompt = torch.tensor([[BOS, t] for t in targets])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(requests[0].sample_seed)
            out = model.generate(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=True,
                temperature=sampling.temperature,
                top_p=1.0,
                top_k=0,
                max_new_tokens=self.tokens,
                min_new_tokens=self.tokens,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=0,
            )
        completion = out.sequences[:, 2:]
        logits = torch.stack(out.logits, 1).float() / sampling.temperature
        lps = torch.log_softmax(logits, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        records = []
        for i, (env, req) in enumerate(zip(envs, requests)):
            _, reward, *_ = env.step(completion[i].tolist())
            records.append(
                TrajectoryRecord(
                    env_id=req.env_id,
                    seed=req.seed,
                    messages=[],
                    reward=reward,
                    success=reward >= 0.5,
                    termination="done",
                    token_ids=out.sequences[i].tolist(),
                    loss_mask=[0, 0] + [1] * self.tokens,
                    logprobs=[0.0, 0.0] + lps[i].tolist(),
                )
            )
        return records


def run_ours(args, workdir: Path) -> tuple[float, float]:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=TargetTokenEnv, disable_env_checker=True)
    cfg = GRPOConfig(
        iterations=args.steps,
        groups_per_iter=args.groups,
        group_size=args.group_size,
        lr=1e-3,
        micro_batch_size=args.groups * args.group_size,
        max_new_tokens=args.tokens,
        checkpoint_every=10**6,
        threads=1,
        tensorboard=False,
        progress=False,
        lora=LoraSettings(r=8, alpha=16, target_modules=LORA_TARGETS),
    )
    holder = {}
    trainer = GRPOTrainer(
        build_model(),
        GenerateBackend(lambda: holder["m"], args.tokens),
        cfg,
        env=ENV_ID,
        adapter="bench",
        output_dir=workdir / "ours",
    )
    holder["m"] = trainer.model
    times, rewards = [], []
    for it in range(args.steps):
        t0 = time.perf_counter()
        rewards.append(trainer.run_iteration(it)["reward_mean"])
        times.append(time.perf_counter() - t0)
    return args.groups * args.group_size / float(np.mean(times[1:])), rewards[-1]


def run_trl(args, workdir: Path) -> tuple[float, float]:
    from datasets import Dataset
    from grpo_multiturn_trl import step_timer
    from peft import LoraConfig
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t63"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t2", bos_token="t1")
    rng = np.random.default_rng(0)
    prompts = [f"t{BOS} t{int(rng.choice(TARGETS))}" for _ in range(args.groups * args.steps * 2)]

    def reward(completions, completion_ids, prompts, **_):
        return [float(np.mean([t == int(p.split()[1][1:]) for t in ids])) for p, ids in zip(prompts, completion_ids)]

    n = args.groups * args.group_size
    targs = TRLConfig(
        output_dir=str(workdir / "trl"),
        per_device_train_batch_size=n,
        num_generations=args.group_size,
        max_completion_length=args.tokens,
        generation_kwargs={"min_new_tokens": args.tokens},
        learning_rate=1e-3,
        max_steps=args.steps,
        beta=0.0,
        temperature=1.0,
        top_k=0,
        loss_type="bnpo",
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        logging_steps=args.steps,
        disable_tqdm=True,
        seed=0,
        lr_scheduler_type="constant",
    )
    times: list[float] = []

    trainer = TRLTrainer(
        model=build_model(),
        reward_funcs=reward,
        args=targs,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        callbacks=[step_timer(times)],
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"),
    )
    trainer.train()
    last_reward = [h for h in trainer.state.log_history if "reward" in h][-1]["reward"]
    return n / float(np.mean(times[1:])), last_reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--multi-turn", action="store_true",
                        help="precondition_verification-v0 with the shipped base (grpo_multiturn_trl.py)")
    parser.add_argument("--checkpoint", default=str(shipped_checkpoint()))
    args = parser.parse_args()
    if args.multi_turn:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from grpo_multiturn_trl import main as multi_turn_main

        multi_turn_main(args)
        return
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        ours, ours_r = run_ours(args, Path(tmp))
        trl_sps, trl_r = run_trl(args, Path(tmp))
    print(
        f"setup: {args.groups} groups x G={args.group_size}, {args.tokens} new tokens, "
        f"{args.steps} steps (first excluded)"
    )
    print(f"ours: {ours:8.1f} samples/s   (last-step reward {ours_r:.3f})")
    print(f"TRL : {trl_sps:8.1f} samples/s   (last-step reward {trl_r:.3f})")
    print(f"ratio ours/TRL: {ours / trl_sps:.2f}")


if __name__ == "__main__":
    main()
