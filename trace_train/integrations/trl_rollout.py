"""Train on any ``trace/*`` env with TRL's ``GRPOTrainer``: a ``rollout_func`` that plays the env.

    from trl import GRPOConfig, GRPOTrainer
    from trace_train.integrations.trl_rollout import TraceEnvRollout, env_reward, seed_prompts

    dataset = Dataset.from_dict({"prompt": seed_prompts(range(100))})    # one row per env seed
    rollout = TraceEnvRollout("trace/precondition_verification-v0", max_new_tokens=96)
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=env_reward,
                          train_dataset=dataset, rollout_func=rollout, args=GRPOConfig(...))

Each prompt only names an env seed (``"trace env seed 17"``); TRL repeats it ``num_generations``
times and every copy becomes one member of that seed's group. The episodes are played by this
library's ``hf`` rollout backend on ``trainer.model`` (its active LoRA, batched turns, cross-turn KV
caches), each member with its own sampler seeded from ``(seed, global step, env seed, member)``, so a
run repeats its episodes exactly. Under several processes a member's number includes its process's place in
the global batch: the copies of one env seed that TRL spreads over processes each sample their own episode.
What TRL receives per episode:

* ``prompt_ids``: the rendered first prompt (system + first user turn), up to the first sampled token;
* ``completion_ids``: the rest of the episode's token stream — the policy's turns and, between them,
  the env's observations (user / tool turns) and the chat template's turn boundaries;
* ``env_mask``: 1 exactly on the tokens the policy sampled (the records' loss mask), so TRL's loss
  leaves the env's tokens out;
* ``logprobs``: the sampler's log-probs on those tokens (0.0 on the others);
* extra fields for the reward functions: ``env_reward`` (the env's reward), ``env_success``,
  ``env_seed`` and ``env_termination``; ``env_reward`` below returns the first.

Sampling follows ``trainer.args`` (temperature, top_p); a TRL setting the backend cannot honour
(``top_k``, ``min_p``, a repetition penalty) fails before any episode is played. Hinted episodes
(``grpo.hint_fraction``) are a feature of this library's trainer and are not offered here.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from trace_envs.records import TrajectoryRecord
from trace_train.rollout.base import EpisodeRequest, RolloutBackend, SamplingParams

logger = logging.getLogger(__name__)

PROMPT_FORMAT = "trace env seed {seed}"
_SEED = re.compile(r"env seed (-?\d+)")
REQUIRED_KEYS = ("prompt_ids", "completion_ids", "logprobs", "env_mask")


def seed_prompts(seeds: Iterable[int]) -> list[str]:
    """Dataset prompts naming env seeds, one per seed (``"trace env seed 17"``)."""
    return [PROMPT_FORMAT.format(seed=int(s)) for s in seeds]


def env_seed_from_prompt(prompt: Any) -> int:
    """The env seed a prompt names: a string, or a chat (list of messages) whose last message names it."""
    text = prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        text = prompt[-1].get("content", "")
    match = _SEED.search(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"prompt {prompt!r} names no env seed; build the dataset's prompts with seed_prompts()")
    return int(match.group(1))


def member_seed(seed: int, step: int, env_seed: int, member: int) -> int:
    """The sampler seed of one group member: a function of the run seed, the step, the env seed and the member."""
    entropy = [int(seed) & 0xFFFFFFFF, int(step), int(env_seed) & 0xFFFFFFFF, int(member)]
    return int(np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32).astype(np.uint64) @ [1 << 32, 1])


def records_to_trl(records: Sequence[TrajectoryRecord], filler_id: int = 0) -> dict[str, list]:
    """TRL ``rollout_func`` output for token-level records (see the module docstring). A record with no sampled
    token (its env failed at reset) becomes a masked one-token completion after an at least one-token prompt,
    ``filler_id`` standing in for ids it does not have: TRL builds a tensor of each list, and an empty one is a
    float tensor that breaks the batch's embedding lookup."""
    out: dict[str, list] = {k: [] for k in (*REQUIRED_KEYS, "env_reward", "env_success", "env_seed",
                                            "env_termination")}
    for rec in records:
        if rec.token_ids is None or rec.loss_mask is None:
            raise ValueError(f"record {rec.episode_id} has no token_ids/loss_mask: TRL needs token-level records")
        if len(rec.token_ids) != len(rec.loss_mask):
            raise ValueError(f"record {rec.episode_id}: {len(rec.token_ids)} token ids, {len(rec.loss_mask)} mask")
        start = next((i for i, m in enumerate(rec.loss_mask) if m), None)
        if start is None:  # nothing sampled (the env failed on reset): one masked token keeps TRL's shapes valid
            ids = list(rec.token_ids)
            out["prompt_ids"].append(ids[:-1] if len(ids) >= 2 else [filler_id])
            out["completion_ids"].append(ids[-1:] if ids else [filler_id])
            out["env_mask"].append([0])
            out["logprobs"].append([0.0])
        else:
            logprobs = rec.logprobs if rec.logprobs is not None else [0.0] * len(rec.token_ids)
            out["prompt_ids"].append(list(rec.token_ids[:start]))
            out["completion_ids"].append(list(rec.token_ids[start:]))
            out["env_mask"].append([int(m) for m in rec.loss_mask[start:]])
            out["logprobs"].append([float(x) for x in logprobs[start:]])
        out["env_reward"].append(float(rec.reward))
        out["env_success"].append(bool(rec.success))
        out["env_seed"].append(int(rec.seed))
        out["env_termination"].append(str(rec.termination))
    return out


def env_reward(completions: list, env_reward: list[float], **_: Any) -> list[float]:
    """TRL reward function: the env's own reward of each episode (the ``env_reward`` field)."""
    return [float(r) for r in env_reward]


class TraceEnvRollout:
    """A TRL ``GRPOTrainer`` ``rollout_func`` that plays ``env_id`` with ``trainer.model``.

    ``backend_factory(model, tokenizer) -> RolloutBackend`` replaces the default
    ``HFRolloutBackend(model, tokenizer, **backend_kwargs)``. ``last_records`` holds the records of the
    latest call (for inspection and tests).
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        max_new_tokens: int = 96,
        seed: int | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        backend_factory: Callable[[Any, Any], RolloutBackend] | None = None,
    ) -> None:
        from trace_envs.env_refs import resolve_env_ids

        resolve_env_ids([env_id])  # an unknown id fails here, not in the first training step
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.backend_kwargs = dict(backend_kwargs or {})
        self.backend_factory = backend_factory
        self.last_records: list[TrajectoryRecord] = []
        self._backend: tuple[int, RolloutBackend] | None = None

    def sampling(self, args: Any) -> SamplingParams:
        """The sampling TRL's ``args`` ask for, or ``ValueError`` for a setting the backend cannot honour."""
        unsupported = []
        if getattr(args, "top_k", 0) not in (0, None):
            unsupported.append(f"top_k={args.top_k}")
        if getattr(args, "min_p", None) is not None:
            unsupported.append(f"min_p={args.min_p}")
        if getattr(args, "repetition_penalty", 1.0) not in (1.0, None):
            unsupported.append(f"repetition_penalty={args.repetition_penalty}")
        if unsupported:
            raise ValueError(f"TraceEnvRollout samples with temperature and top_p only; unset {', '.join(unsupported)}")
        return SamplingParams(temperature=float(getattr(args, "temperature", 1.0)),
                              top_p=float(getattr(args, "top_p", 1.0) or 1.0), max_new_tokens=self.max_new_tokens)

    def requests(self, prompts: Sequence[Any], step: int, seed: int, process_index: int = 0) -> list[EpisodeRequest]:
        """One request per prompt; repeated prompts of one env seed are the members of its group.

        ``process_index``: this process's place in a multi-process run, whose global batch is the processes'
        ``prompts`` one after another (TRL's ``RepeatSampler`` spreads one env seed's copies over processes on
        purpose). A member is numbered from ``process_index * len(prompts)``, so no two processes give a group
        the same sampler; process 0 (and a single-process run) numbers its members from 0."""
        if process_index < 0:
            raise ValueError(f"process_index must be >= 0, got {process_index}")
        offset = int(process_index) * len(prompts)
        members: dict[int, int] = {}
        groups: dict[int, int] = {}
        out = []
        for prompt in prompts:
            env_seed = env_seed_from_prompt(prompt)
            member = members.get(env_seed, 0)
            members[env_seed] = member + 1
            group = groups.setdefault(env_seed, len(groups))
            sample_seed = member_seed(seed, step, env_seed, offset + member)
            out.append(EpisodeRequest(self.env_id, seed=env_seed, sample_seed=sample_seed,
                                      env_kwargs=dict(self.env_kwargs), group=group))
        return out

    def _backend_for(self, model: Any, tokenizer: Any) -> RolloutBackend:
        if self._backend is None or self._backend[0] != id(model):
            if self.backend_factory is not None:
                backend = self.backend_factory(model, tokenizer)
            else:
                from trace_train.rollout.hf import HFRolloutBackend

                device = str(next(model.parameters()).device)
                backend = HFRolloutBackend(model, tokenizer, **{"device": device, **self.backend_kwargs})
            self._backend = (id(model), backend)
        return self._backend[1]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        """Play one episode per prompt with ``trainer.model`` and return TRL's rollout fields."""
        model, args = trainer.model, trainer.args
        tokenizer = getattr(trainer, "processing_class", None)
        sampling = self.sampling(args)
        seed = int(getattr(args, "seed", 0)) if self.seed is None else self.seed
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        accelerator = getattr(trainer, "accelerator", None)  # a TRL trainer's; absent: one process
        process_index = int(accelerator.process_index) if accelerator is not None else 0
        requests = self.requests(prompts, step, seed, process_index)
        adapter = getattr(model, "active_adapter", None) if hasattr(model, "peft_config") else None
        records = self._backend_for(model, tokenizer).rollout(requests, sampling, adapter)
        if len(records) != len(requests):
            raise RuntimeError(f"backend returned {len(records)} records for {len(requests)} prompts")
        self.last_records = list(records)
        logger.debug("played %d episodes of %s at step %d", len(records), self.env_id, step)
        filler = getattr(tokenizer, "pad_token_id", None)
        if filler is None:
            filler = getattr(tokenizer, "eos_token_id", None)
        return records_to_trl(records, filler_id=int(filler or 0))
