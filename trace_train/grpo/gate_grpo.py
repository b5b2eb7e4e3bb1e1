"""Gate-only GRPO: the gates of a :class:`~trace_moe.composed.ComposedModel` trained by seeded-group GRPO.

The ablation of supervised gate training (``moe.train.method: grpo_target | grpo_mixture``): the composed
model itself plays seeded groups (``HFRolloutBackend`` over ``composed.model``, gates routing every sampled
token with their top-k), rewards become group advantages, and the one GRPO update of the code base
(``trace_train.grpo.update.optimize``: PPO-clip of ``trace_train.grpo.loss``) steps AdamW on the gate
parameters only; the base and every adapter stay frozen (``composed.check_trainable()``). The update batch
is the records' own token ids and loss masks, never re-tokenized text.

Gradients reach a gate through the soft weight of each chosen adapter slot (``topk_weights``: the chosen
slots' softmax probabilities). A token routed to the base slot alone (slot 0 carries no adapter update)
gives its gate no gradient: with ``top_k=1`` and gates that send every token to the base, GRPO cannot move
the gates. Start from supervised gates, use ``moe.gate.top_k >= 2``, or a smaller ``moe.gate.base_bias``;
the run warns when an update had samples but a zero gate gradient.

Layout under ``output_dir`` (like ``GRPOTrainer``)::

    config.json  metrics.jsonl  seeds.jsonl  rollouts/iter_0000.jsonl ...
    checkpoints/iter_0004/{composed/, optimizer.pt, state.pt}  checkpoints/latest.json
    composed/    # the final composition (ComposedModel.load)

Checkpoints are written to a temp dir and renamed into place; ``resume=True`` continues from the latest.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from trace_envs.atomic_io import publish_dir
from trace_envs.records import (
    TrajectoryRecord,
    append_jsonl,
    drop_rows_from,
    write_json_atomic,
    write_trajectories,
)
from trace_moe.composed import GATES_FILE, ComposedModel
from trace_moe.config import GateGRPOConfig
from trace_train.grpo import dist
from trace_train.grpo.advantages import group_advantages
from trace_train.grpo.checkpoint import check_resume_config, latest_checkpoint, write_checkpoint
from trace_train.grpo.config import GRPOConfig, check_env_ids, check_output_dir, normalize_envs
from trace_train.grpo.hints import training_sequence
from trace_train.grpo.metrics import MetricsLogger
from trace_train.grpo.seeds import plan_iteration
from trace_train.grpo.trainer import rollout_options, shaped_reward
from trace_train.grpo.update import Sample, optimize, sequence_logprobs
from trace_train.rollout.base import EpisodeRequest, SamplingParams
from trace_train.rollout.hf import HFRolloutBackend
from trace_train.threads import set_torch_threads

logger = logging.getLogger(__name__)

FINAL_DIR = "composed"
RUN_NAME = "gates"  # the name check_output_dir and the metrics logger know this run by


def grpo_config(cfg: GateGRPOConfig) -> GRPOConfig:
    """The ``GRPOConfig`` the shared update runs with: ``cfg``'s values, GRPO mode, no KL, no hints."""
    out = GRPOConfig(
        iterations=cfg.iterations, groups_per_iter=cfg.groups_per_iter, group_size=cfg.group_size, lr=cfg.lr,
        weight_decay=cfg.weight_decay, eps=cfg.eps, eps_high=cfg.eps_high, loss_level=cfg.loss_level,
        advantage_std=cfg.advantage_std, format_penalty=cfg.format_penalty, grad_clip=cfg.grad_clip,
        ppo_epochs=cfg.ppo_epochs, mini_batches=cfg.mini_batches, micro_batch_size=cfg.micro_batch_size,
        old_logprobs=cfg.old_logprobs, temperature=cfg.temperature, top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens, checkpoint_every=cfg.checkpoint_every, seed=cfg.seed,
        threads=cfg.threads, mode="grpo", kl_beta=0.0, hint_fraction=0.0, tensorboard=False, trackers=[],
        progress=cfg.progress,
    )
    out.validate()
    return out


def train_gates_grpo(
    composed: ComposedModel,
    tokenizer: Any,
    env: str | Mapping[str, float],
    cfg: GateGRPOConfig,
    output_dir: str | Path,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    resume: bool = False,
    backend_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Train only the gates of ``composed`` by GRPO on ``env`` (an id, or a ``{id: weight}`` mixture).

    ``backend_kwargs`` go to ``HFRolloutBackend`` (``render_tools``, ``max_turns``, ``policy_name``, ...).
    Returns ``{"iterations", "start_iteration", "composed_dir", "trainable_params", "history"}``; the
    gates of ``composed`` are left trained in place.
    """
    run = _GateGRPORun(composed, tokenizer, env, cfg, output_dir, env_kwargs, resume, backend_kwargs)
    return run.train()


class _GateGRPORun:
    """One gate-only GRPO run; every check runs in the constructor, before any rollout."""

    def __init__(self, composed: ComposedModel, tokenizer: Any, env: str | Mapping[str, float],
                 cfg: GateGRPOConfig, output_dir: str | Path, env_kwargs: Mapping[str, Any] | None,
                 resume: bool, backend_kwargs: Mapping[str, Any] | None) -> None:
        if not isinstance(cfg, GateGRPOConfig):
            raise TypeError(f"cfg must be a GateGRPOConfig (build it from moe.grpo), got {type(cfg).__name__}")
        if dist.world_size() > 1:
            raise ValueError("gate-only GRPO runs in one process; launch it without torch.distributed")
        self.cfg, self.grpo = cfg, grpo_config(cfg)
        self.envs = normalize_envs(env)
        check_env_ids(list(self.envs))
        self.output_dir = Path(output_dir)
        check_output_dir(self.output_dir, RUN_NAME, resume)
        if not resume and (self.output_dir / FINAL_DIR).exists():
            raise ValueError(f"{self.output_dir / FINAL_DIR} already exists; use a fresh output_dir or resume=true")
        if cfg.threads > 0:
            set_torch_threads(cfg.threads)
        self.composed = composed
        self.report = composed.check_trainable()  # only gate parameters require grad
        self.lm = composed.model  # the HF model with the gated projections installed in place
        self.params = composed.gate_parameters()
        self.env_kwargs = dict(env_kwargs or {})
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0
        kwargs = {"threads": cfg.threads, "policy_name": RUN_NAME, **dict(backend_kwargs or {})}
        self.backend = HFRolloutBackend(self.lm, tokenizer, **kwargs)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.start_iteration = 0
        # what the checkpoint's gates were trained over: a resume must find the same
        identity = {"slots": composed.slot_names, "gate": asdict(composed.gate_config),
                    "adapters": {a.name: a.content_hash for a in composed.adapters}, "env_kwargs": self.env_kwargs,
                    "rollout": rollout_options(self.backend)}
        checkpoint = latest_checkpoint(self.output_dir) if resume else None
        if checkpoint is not None:
            check_resume_config(self.output_dir, cfg.to_dict(), self.envs, section="gate_grpo", identity=identity)
            self.start_iteration = self._load(checkpoint)
            logger.info("resumed gate GRPO from %s (iteration %d)", checkpoint, self.start_iteration)
        elif resume:
            logger.info("resume requested but %s has no checkpoint; starting fresh", self.output_dir)
        if resume:  # rows logged after the checkpoint (or before the first one) are replayed
            for name in ("metrics.jsonl", "seeds.jsonl"):
                drop_rows_from(self.output_dir / name, "iteration", self.start_iteration)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.output_dir / "config.json", {
            "gate_grpo": cfg.to_dict(), "env": self.envs, "trainable_params": self.report.trainable, **identity,
        })
        self.metrics = MetricsLogger(self.output_dir, tensorboard=False, run_name=RUN_NAME, config=cfg.to_dict())

    # ------------------------------------------------------------------ checkpoints
    def _save(self, iteration: int) -> Path:
        def write(tmp: Path) -> None:
            self.composed.save(tmp / FINAL_DIR)
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save({"iteration": iteration, "slots": self.composed.slot_names,
                        "torch_rng": torch.get_rng_state(), "numpy_rng": np.random.get_state()}, tmp / "state.pt")

        return write_checkpoint(self.output_dir, iteration, write)

    def _load(self, path: Path) -> int:
        from safetensors.torch import load_file

        state = torch.load(path / "state.pt", weights_only=False)
        if state["slots"] != self.composed.slot_names:
            raise ValueError(f"checkpoint {path} is for slots {state['slots']}, the composition has "
                             f"{self.composed.slot_names}")
        self.composed.gates.load_state_dict(load_file(str(path / FINAL_DIR / GATES_FILE)), strict=True)
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        return int(state["iteration"])

    def _save_final(self) -> Path:
        # an existing final composition is only there on resume (checked in the constructor): this run's own
        return publish_dir(self.output_dir / FINAL_DIR, self.composed.save)

    # ------------------------------------------------------------------ iteration
    def _rollout(self, requests: list[EpisodeRequest]) -> list[TrajectoryRecord]:
        cfg = self.cfg
        sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
        records = self.backend.rollout(requests, sampling, None)
        if len(records) != len(requests):
            raise RuntimeError(f"backend returned {len(records)} records for {len(requests)} requests")
        for rec in records:
            if rec.token_ids is None or rec.loss_mask is None:
                raise RuntimeError(f"record {rec.episode_id} has no token_ids/loss_mask")
            if cfg.old_logprobs == "sampler" and rec.logprobs is None:
                raise RuntimeError(f"old_logprobs=sampler but record {rec.episode_id} has no sampler logprobs")
        return records

    def _old_logprobs(self, samples: list[Sample]) -> list[torch.Tensor]:
        g = self.grpo
        use_sampler = g.old_logprobs == "sampler"
        missing = [i for i, s in enumerate(samples) if not use_sampler or s.sampler_logprobs is None]
        self.lm.eval()
        recomputed = sequence_logprobs(self.lm, [samples[i] for i in missing], g.micro_batch_size, g.temperature,
                                       self.pad_id) if missing else []
        out = dict(zip(missing, recomputed))
        return [out[i] if i in out else torch.tensor(s.sampler_logprobs, dtype=torch.float32)
                for i, s in enumerate(samples)]

    def run_iteration(self, iteration: int) -> dict[str, Any]:
        """Rollout → advantages → one gate update; returns the iteration's metrics."""
        g, G = self.grpo, self.grpo.group_size
        t0 = time.perf_counter()
        plan = plan_iteration(g.seed, iteration, g.groups_per_iter, G, self.envs)
        requests = [EpisodeRequest(env_id=p.env_id, seed=p.env_seed, sample_seed=s, env_kwargs=dict(self.env_kwargs),
                                   group=p.group) for p in plan for s in p.sample_seeds]
        records = self._rollout(requests)
        t_rollout = time.perf_counter() - t0
        rewards = np.asarray([shaped_reward(r, g.format_penalty) for r in records], dtype=np.float64)
        adv = group_advantages(rewards, G, g.advantage_std, g.adv_eps)
        samples: list[Sample] = []
        for i, rec in enumerate(records):
            seq = training_sequence(rec)
            if adv.keep[i] and sum(seq.loss_mask[1:]) > 0:
                samples.append(Sample(seq.token_ids, seq.loss_mask, float(adv.values[i]), seq.sampler_logprobs))
        one_step = g.ppo_epochs * g.mini_batches == 1
        old_lps = self._old_logprobs(samples) if samples and (g.old_logprobs == "sampler" or not one_step) else None
        before = [p.detach().clone() for p in self.params]
        t1 = time.perf_counter()
        update = optimize(self.lm, self.optimizer, self.params, samples, g, iteration, old_lps, None, self.pad_id)
        t_update = time.perf_counter() - t1
        self.lm.eval()
        delta = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(self.params, before)))
        if samples and update.get("grad_norm", 0.0) == 0.0:
            logger.warning("iteration %d: %d samples but no gradient reached the gates (every token routed to the "
                           "base slot alone?); train the gates supervised first or use moe.gate.top_k >= 2",
                           iteration, len(samples))
        for p in plan:
            append_jsonl(self.output_dir / "seeds.jsonl", p.to_dict())
        write_trajectories(self.output_dir / "rollouts" / f"iter_{iteration:04d}.jsonl", records)
        n = max(len(records), 1)
        return {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "env_reward_mean": sum(float(r.reward) for r in records) / n,
            "success_rate": sum(bool(r.success) for r in records) / n,
            "constant_group_fraction": adv.constant_fraction,
            "trained_samples": len(samples),
            "gate_delta_norm": delta,
            "time_rollout_s": t_rollout,
            "time_update_s": t_update,
            "env_groups": {e: sum(p.env_id == e for p in plan) for e in self.envs},
            **update,
        }

    # ------------------------------------------------------------------ train
    def train(self) -> dict[str, Any]:
        cfg = self.cfg
        history: list[dict[str, Any]] = []
        progress = None
        if cfg.progress:
            from rich.progress import Progress

            progress = Progress(transient=False)
            progress.start()
            task = progress.add_task("gate GRPO", total=cfg.iterations, completed=self.start_iteration)
        try:
            for iteration in range(self.start_iteration, cfg.iterations):
                metrics = self.run_iteration(iteration)
                history.append(metrics)
                self.metrics.log(iteration, metrics)
                done = iteration + 1
                if done % cfg.checkpoint_every == 0 or done == cfg.iterations:
                    self._save(done)
                if progress is not None:
                    progress.update(task, advance=1, description=f"gate GRPO reward={metrics['reward_mean']:.3f}")
        finally:
            if progress is not None:
                progress.stop()
            self.metrics.close()
        final = self._save_final()
        return {"iterations": cfg.iterations, "start_iteration": self.start_iteration, "composed_dir": str(final),
                "trainable_params": self.report.trainable, "history": history}
