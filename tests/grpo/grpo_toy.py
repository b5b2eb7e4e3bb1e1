"""Test helpers: a tiny Qwen3 model, a toy seeded env and a fake backend that really samples.

The env ``grpo_toy/TargetToken-v0`` draws a target token from its seed; the prompt is
``[BOS, target]`` and the reward is the fraction of completion tokens equal to the target. The fake
backend samples from the model token by token (real tokens, real log-probs at the sampling
temperature) with one ``torch.Generator`` per request seeded by ``sample_seed``.
"""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from trace_train.rollout.base import EpisodeRequest, SamplingParams
from trace_train.trajectory import TrajectoryRecord

ENV_ID = "grpo_toy/TargetToken-v0"
VOCAB = 12
BOS = 1
TARGETS = (3, 4, 5, 6)


class TargetTokenEnv(gym.Env):
    """Single-turn: observe a target token, emit tokens; reward = fraction equal to the target."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Discrete(VOCAB)
        self.action_space = gym.spaces.Sequence(gym.spaces.Discrete(VOCAB))
        self.target = TARGETS[0]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = int(self.np_random.choice(TARGETS))
        return self.target, {}

    def step(self, action):
        tokens = list(action)
        reward = float(np.mean([t == self.target for t in tokens])) if tokens else 0.0
        return self.target, reward, True, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=TargetTokenEnv, disable_env_checker=True)


def tiny_model(seed: int = 0) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        initializer_range=0.2,  # a wide lm_head so a small adapter can move the output distribution
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    return model.eval()


class FakeBackend:
    """Plays ``TargetTokenEnv`` with the in-process model (adapter selected by name)."""

    def __init__(
        self, model_ref, completion_len: int = 6, valid_fraction: float | None = None, success_at: float = 0.5
    ) -> None:
        self.model_ref = model_ref  # callable returning the current (peft) model
        self.completion_len = completion_len
        self.valid_fraction = valid_fraction
        self.success_at = success_at
        self.calls: list[list[EpisodeRequest]] = []

    @torch.no_grad()
    def rollout(self, requests: Sequence[EpisodeRequest], sampling: SamplingParams, adapter: str | None = None):
        self.calls.append(list(requests))
        model = self.model_ref()
        if adapter is not None:
            model.set_adapter(adapter)
        out = []
        for req in requests:
            env = gym.make(req.env_id)
            target, _ = env.reset(seed=req.seed)
            gen = torch.Generator().manual_seed(req.sample_seed)
            ids = [BOS, int(target)]
            lps = [0.0, 0.0]
            for _ in range(self.completion_len):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float() / sampling.temperature
                logp = torch.log_softmax(logits, -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                ids.append(tok)
                lps.append(float(logp[tok]))
            _, reward, *_ = env.step(ids[2:])
            info = {} if self.valid_fraction is None else {"format_valid_fraction": self.valid_fraction}
            out.append(
                TrajectoryRecord(
                    env_id=req.env_id,
                    seed=req.seed,
                    messages=[],
                    reward=float(reward),
                    success=reward >= self.success_at,
                    termination="done",
                    policy=adapter or "base",
                    info=info,
                    token_ids=ids,
                    loss_mask=[0, 0] + [1] * self.completion_len,
                    logprobs=lps,
                    episode_id=f"{req.seed}|{req.sample_seed}",
                )
            )
        return out


def ddp_worker(rank: int, world: int, port: int, out_dir: str, result_file: str, cfg: dict) -> None:
    """One rank of the DDP test: gloo process group, one training run, rank 0 saves the adapter."""
    import torch.distributed as tdist

    from trace_train.grpo import GRPOConfig, GRPOTrainer
    from trace_train.grpo.lora import adapter_state_dict

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        holder = {}
        backend = FakeBackend(lambda: holder["model"])
        trainer = GRPOTrainer(
            tiny_model(0), backend, GRPOConfig.from_mapping(cfg), env=ENV_ID, adapter="cap", output_dir=out_dir
        )
        holder["model"] = trainer.model
        history = trainer.train().history
        n_requests = sum(len(c) for c in backend.calls)
        if rank == 0:
            torch.save(
                {"state": adapter_state_dict(trainer.model, "cap"), "history": history, "requests": n_requests},
                result_file,
            )
    finally:
        tdist.destroy_process_group()
