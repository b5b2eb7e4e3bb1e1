"""``GRPOTrainer``: seeded-group GRPO (or SFT on successes) of one LoRA adapter, base frozen.

One iteration: plan seeds (G members share an env seed) → ``backend.rollout`` → rewards (+ format
penalty) → group advantages (constant groups dropped) → log-probs under the current policy →
PPO-clip loss → AdamW with grad clipping. Under ``torch.distributed`` the groups are split across
ranks, rewards are gathered so every rank computes the same advantages, and gradients are summed;
only rank 0 writes files.

If the backend has ``sync_adapter(name, path) -> str`` (a server backend), the current adapter is
saved as ``adapters/<name>/v<iter>`` each iteration and pushed under the versioned name
``<name>@<iter>`` before rollout; otherwise the backend is assumed to share ``model`` in-process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from trace_envs.records import (
    TrajectoryRecord,
    append_jsonl,
    drop_rows_from,
    format_valid_fraction,
    record_info,
    write_json_atomic,
    write_trajectories,
)
from trace_train.grpo import dist
from trace_train.grpo.advantages import group_advantages
from trace_train.grpo.checkpoint import check_resume_config, latest_checkpoint, load_checkpoint, save_checkpoint
from trace_train.grpo.config import (
    ADDED_LATER,
    GRPOConfig,
    check_env_ids,
    check_output_dir,
    check_reset_options,
    normalize_envs,
)
from trace_train.grpo.hints import is_hinted, training_sequence
from trace_train.grpo.lora import (
    assert_only_lora_trainable,
    attach_adapter,
    base_fingerprint,
    save_adapter,
    trainable_parameters,
    versioned_dir,
    versioned_name,
)
from trace_train.grpo.loss import denominator_scale
from trace_train.grpo.metrics import MetricsLogger
from trace_train.grpo.seeds import GroupSeeds, plan_iteration
from trace_train.grpo.update import Sample, optimize, sequence_logprobs
from trace_train.rollout.base import EpisodeRequest, RolloutBackend, SamplingParams
from trace_train.threads import set_torch_threads

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a finished ``train()`` leaves behind."""

    iterations: int
    adapter_dir: Path | None
    history: list[dict[str, Any]] = field(default_factory=list)


def shaped_reward(record: TrajectoryRecord, format_penalty: float) -> float:
    """Env reward minus ``format_penalty × (1 − format_valid_fraction)`` when the backend reports it."""
    valid = format_valid_fraction(record_info(record))
    if format_penalty and valid is not None:
        return float(record.reward) - format_penalty * (1.0 - valid)
    return float(record.reward)


# HFRolloutBackend options that change what an episode plays (max_batch only changes how many play at once)
ROLLOUT_OPTIONS = ("max_turns", "max_context", "render_tools", "system_suffix")


def base_identity(model: torch.nn.Module) -> dict[str, Any]:
    """What a resume must find unchanged about the base model: its fingerprint (``lora.base_fingerprint``: every
    tensor's bytes, so its dtype too) and its dtype, by name for a readable refusal."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()})
    return {"base_fingerprint": base_fingerprint(model), "dtype": ", ".join(dtypes)}


def rollout_options(backend: Any) -> dict[str, Any]:
    """The backend's ``ROLLOUT_OPTIONS`` (those it has)."""
    return {key: getattr(backend, key) for key in ROLLOUT_OPTIONS if hasattr(backend, key)}


def _hint_logprob_shift(samples: list[Sample], old_lps: Mapping[int, torch.Tensor],
                        hinted: list[tuple[int, list[float] | None]]) -> tuple[float, int]:
    """(sum, count) of log q − log p over the hinted members' sampled tokens (q: hinted, p: plain prompt)."""
    total, count = 0.0, 0
    for i, hinted_lps in hinted:
        if hinted_lps is None:
            continue
        mask = torch.tensor(samples[i].loss_mask)
        mask[0] = 0.0
        diff = (torch.tensor(hinted_lps) - old_lps[i]) * mask
        total, count = total + float(diff.sum()), count + int(mask.sum())
    return total, count


def _mean_over_ranks(part: tuple[float, int] | None) -> float | None:
    parts = [p for p in dist.all_gather_objects(part) if p is not None]
    count = sum(c for _, c in parts)
    return sum(t for t, _ in parts) / count if count else None


def _hint_split(total: dict[str, float]) -> dict[str, float | None]:
    """Success and env reward of the hinted and the unhinted members."""
    n_h, n = total["hinted_records"], total["records"]
    n_u = n - n_h
    return {
        "hinted_records": n_h,
        "success_rate_hinted": total["hinted_success"] / n_h if n_h else None,
        "success_rate_unhinted": (total["success"] - total["hinted_success"]) / n_u if n_u else None,
        "env_reward_mean_hinted": total["hinted_env_reward"] / n_h if n_h else None,
        "env_reward_mean_unhinted": (total["env_reward"] - total["hinted_env_reward"]) / n_u if n_u else None,
    }


class GRPOTrainer:
    """Trains adapter ``adapter`` on ``env`` (an id or a ``{id: weight}`` mixture) with ``backend``.

    ``backend`` is a rollout backend, or a factory called with the adapted (peft) model — for
    in-process backends that must hold the model the trainer updates. All checks (config, env ids,
    output-dir clash) run in the constructor, before any work.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        backend: RolloutBackend | Callable[[torch.nn.Module], RolloutBackend],
        config: GRPOConfig,
        env: str | Mapping[str, float],
        adapter: str,
        output_dir: str | Path,
        resume: bool = False,
        env_kwargs: Mapping[str, Any] | None = None,
        pad_id: int = 0,
    ) -> None:
        config.validate()
        self.envs = normalize_envs(env)
        check_env_ids(list(self.envs))
        check_reset_options(config, list(self.envs), env_kwargs or {})
        check_output_dir(output_dir, adapter, resume)
        if dist.world_size() > config.groups_per_iter:
            raise ValueError(f"groups_per_iter={config.groups_per_iter} < world size {dist.world_size()}")
        if config.threads > 0:
            set_torch_threads(config.threads)
        self.cfg, self.adapter, self.pad_id = config, adapter, pad_id
        self.output_dir = Path(output_dir)
        self.env_kwargs = dict(env_kwargs or {})
        self.is_main = dist.rank() == 0
        base_model = str(getattr(model, "name_or_path", "") or "")
        identity = base_identity(model)  # before the adapter is attached: the base alone
        self.model = attach_adapter(model, adapter, config.lora)
        n_trainable = assert_only_lora_trainable(self.model, adapter)
        self.params = [p for _, p in trainable_parameters(self.model)]
        self.backend: RolloutBackend = backend if hasattr(backend, "rollout") else backend(self.model)
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay)
        self.start_iteration = 0
        identity.update(env_kwargs=self.env_kwargs, rollout=rollout_options(self.backend))
        checkpoint = latest_checkpoint(self.output_dir) if resume else None
        if checkpoint is not None:
            check_resume_config(self.output_dir, config.to_dict(), self.envs, identity=identity,
                                added_later=ADDED_LATER)
            state = load_checkpoint(checkpoint, self.model, adapter, self.optimizer)
            self.start_iteration = int(state["iteration"])
            logger.info("resumed %s from %s (iteration %d)", adapter, checkpoint, self.start_iteration)
            self._publish_missing_version()
        elif resume:
            logger.info("resume requested but %s has no checkpoint; starting fresh", self.output_dir)
        if self.is_main and resume:  # rows logged after the checkpoint (or before the first one) are replayed
            for name in ("metrics.jsonl", "seeds.jsonl"):
                drop_rows_from(self.output_dir / name, "iteration", self.start_iteration)
        purge = self.start_iteration if resume else None  # TensorBoard hides the points replayed from there on
        self.metrics = MetricsLogger(self.output_dir, config.tensorboard, config.trackers, config.tracker_project,
                                     adapter, config.to_dict(), purge_step=purge) if self.is_main else None
        if self.is_main:
            write_json_atomic(
                self.output_dir / "config.json",
                {"grpo": config.to_dict(), "env": self.envs, "adapter": adapter, "trainable_params": n_trainable,
                 "base_model": base_model, **identity},
            )

    # ----------------------------------------------------------------- rollout
    def _requests(self, plan: list[GroupSeeds]) -> list[EpisodeRequest]:
        return [
            EpisodeRequest(
                env_id=g.env_id, seed=g.env_seed, sample_seed=s, env_kwargs=dict(self.env_kwargs), group=g.group,
                hint=m in g.hinted, twin=g.twin,
            )
            for g in plan
            for m, s in enumerate(g.sample_seeds)
        ]

    def _rollout_adapter(self, iteration: int) -> str:
        sync = getattr(self.backend, "sync_adapter", None)
        if not callable(sync):
            return self.adapter
        path = versioned_dir(self.output_dir, self.adapter, iteration)
        if self.is_main:
            save_adapter(self.model, self.adapter, path)
        dist.barrier()
        return sync(versioned_name(self.adapter, iteration), str(path))

    def _rollout(self, iteration: int, local: list[GroupSeeds]) -> list[TrajectoryRecord]:
        requests = self._requests(local)
        sampling = SamplingParams(
            temperature=self.cfg.temperature, top_p=self.cfg.top_p, max_new_tokens=self.cfg.max_new_tokens
        )
        self.model.eval()
        records = self.backend.rollout(requests, sampling, self._rollout_adapter(iteration)) if requests else []
        if len(records) != len(requests):
            raise RuntimeError(f"backend returned {len(records)} records for {len(requests)} requests")
        for rec in records:
            if rec.token_ids is None or rec.loss_mask is None:
                raise RuntimeError(
                    f"record {rec.episode_id} has no token_ids/loss_mask; GRPO needs token-level records"
                )
            if self.cfg.old_logprobs == "sampler" and rec.logprobs is None:
                raise RuntimeError(f"old_logprobs=sampler but record {rec.episode_id} has no sampler logprobs")
        return records

    # --------------------------------------------------------------- iteration
    def run_iteration(self, iteration: int) -> dict[str, Any]:
        """One full GRPO iteration; returns its metrics (identical on every rank)."""
        cfg, G = self.cfg, self.cfg.group_size
        mode = cfg.mode_at(iteration)
        t0 = time.perf_counter()
        plan = plan_iteration(cfg.seed, iteration, cfg.groups_per_iter, G, self.envs, cfg.hint_fraction,
                              cfg.twin_groups)
        local = plan[dist.rank() :: dist.world_size()]
        records = self._rollout(iteration, local)
        t_rollout = time.perf_counter() - t0

        # Every rank needs every reward to normalize (batch std) identically.
        stats = [
            (g.group, [shaped_reward(r, cfg.format_penalty) for r in records[i * G : (i + 1) * G]])
            for i, g in enumerate(local)
        ]
        all_stats = sorted((s for part in dist.all_gather_objects(stats) for s in part), key=lambda s: s[0])
        rewards = np.asarray([r for _, rs in all_stats for r in rs], dtype=np.float64)
        adv = group_advantages(rewards, G, cfg.advantage_std, cfg.adv_eps) if G >= 2 else None

        samples: list[Sample] = []
        hinted_samples: list[tuple[int, list[float] | None]] = []  # (sample index, hinted sampler log-probs)
        sampled_units = 0  # every record's trainable tokens (sequences), kept or not: the "sampled" loss denominator
        token_units = cfg.loss_level == "token"
        for i, g in enumerate(local):
            for m, rec in enumerate(records[i * G : (i + 1) * G]):
                flat = g.group * G + m
                if mode == "sft":
                    keep, value = bool(rec.success), 0.0
                else:
                    keep, value = bool(adv.keep[flat]), float(adv.values[flat])
                seq = training_sequence(rec)  # a hinted prompt is swapped for the plain one here
                trainable = int(sum(seq.loss_mask[1:]))  # position 0 is never predicted
                if trainable:
                    sampled_units += trainable if token_units else 1
                if keep and trainable > 0:
                    if seq.hinted:
                        hinted_samples.append((len(samples), seq.hinted_sampler_logprobs))
                    samples.append(Sample(seq.token_ids, seq.loss_mask, value, seq.sampler_logprobs))

        t1 = time.perf_counter()
        env_s = self._backend_env_seconds()
        old_lps = ref_lps = None
        hint_shift = None
        if mode == "grpo" and samples:
            one_step = cfg.ppo_epochs * cfg.mini_batches == 1
            if cfg.old_logprobs == "sampler" or not one_step:
                self.model.eval()
                old_lps = self._old_logprobs(samples)
            elif hinted_samples:  # one step: "old = current" is exact; the hinted ones only feed the metric
                self.model.eval()
                hinted_old = sequence_logprobs(self.model, [samples[i] for i, _ in hinted_samples],
                                               cfg.micro_batch_size, cfg.temperature, self.pad_id, cfg.packing)
                hint_shift = _hint_logprob_shift(samples, dict(zip((i for i, _ in hinted_samples), hinted_old)),
                                                 hinted_samples)
            if old_lps is not None:
                hint_shift = _hint_logprob_shift(samples, dict(enumerate(old_lps)), hinted_samples)
            if cfg.kl_beta > 0:
                self.model.eval()
                with self.model.disable_adapter():
                    ref_lps = sequence_logprobs(self.model, samples, cfg.micro_batch_size, cfg.temperature, self.pad_id,
                                                cfg.packing)
        t2 = time.perf_counter()
        step_cfg = cfg if mode == cfg.mode else replace(cfg, mode=mode)
        scale = 1.0
        if mode == "grpo" and cfg.loss_denominator != "informative":
            kept_units = sum(s.n_tokens for s in samples) if token_units else len(samples)
            scale = denominator_scale(cfg.loss_denominator, dist.all_reduce_sum(kept_units),
                                      dist.all_reduce_sum(sampled_units))
        update = optimize(
            self.model, self.optimizer, self.params, samples, step_cfg, iteration, old_lps, ref_lps, self.pad_id,
            scale,
        )
        t_update = time.perf_counter() - t1
        t_step = time.perf_counter() - t2

        hinted = [is_hinted(r) for r in records]
        local_summary = {
            "records": len(records),
            "success": sum(bool(r.success) for r in records),
            "env_reward": sum(float(r.reward) for r in records),
            "hinted_records": sum(hinted),
            "hinted_success": sum(bool(r.success) for r, h in zip(records, hinted) if h),
            "hinted_env_reward": sum(float(r.reward) for r, h in zip(records, hinted) if h),
            "sampled_tokens": sum(int(sum(r.loss_mask)) for r in records),
            "trained_tokens": sum(s.n_tokens for s in samples),
            "trained_samples": len(samples),
            "format_valid": [v for v in (format_valid_fraction(record_info(r)) for r in records) if v is not None],
            "env_ids": [g.env_id for g in local],
        }
        parts = dist.all_gather_objects(local_summary)
        keys = ("records", "success", "env_reward", "sampled_tokens", "trained_tokens", "trained_samples",
                "hinted_records", "hinted_success", "hinted_env_reward")
        total = {k: sum(p[k] for p in parts) for k in keys}
        fmt = [v for p in parts for v in p["format_valid"]]
        elapsed = time.perf_counter() - t0
        metrics: dict[str, Any] = {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "env_reward_mean": total["env_reward"] / max(total["records"], 1),
            "success_rate": total["success"] / max(total["records"], 1),
            "constant_group_fraction": adv.constant_fraction if adv is not None else 0.0,
            "trained_samples": total["trained_samples"],
            "format_valid": float(np.mean(fmt)) if fmt else None,
            "rollout_tokens_per_s": total["sampled_tokens"] / max(t_rollout, 1e-9),
            "train_tokens_per_s": total["trained_tokens"] / max(t_update, 1e-9),
            "samples_per_s": total["records"] / max(elapsed, 1e-9),
            "time_rollout_s": t_rollout,
            "time_update_s": t_update,  # log-prob recomputation + optimizer steps
            "time_logprobs_s": t2 - t1,  # old / reference log-probs (0 when one step makes old = current)
            "time_step_s": t_step,  # forward + backward + AdamW
            "time_env_s": env_s,  # env reset/step/rendering inside the rollout (None: backend does not say)
            "env_groups": {e: sum(p["env_ids"].count(e) for p in parts) for e in self.envs},
            **update,
        }
        if cfg.sft_warmup_iterations > 0:
            metrics["sft_update"] = float(mode == "sft")
        if cfg.loss_denominator != "informative":
            metrics["denominator_scale"] = scale
        if cfg.hint_fraction > 0:
            metrics.update(_hint_split(total))
            metrics["hint_logprob_shift"] = _mean_over_ranks(hint_shift)
        if self.is_main:
            for g in plan:
                append_jsonl(self.output_dir / "seeds.jsonl", g.to_dict())
            all_records = [r for part in dist.all_gather_objects(records) for r in part]
            write_trajectories(self.output_dir / "rollouts" / f"iter_{iteration:04d}.jsonl", all_records)
        else:
            dist.all_gather_objects(records)
        return metrics

    def _backend_env_seconds(self) -> float | None:
        timings = getattr(self.backend, "last_timings", None)
        return float(timings["env_s"]) if isinstance(timings, dict) and "env_s" in timings else None

    def _old_logprobs(self, samples: list[Sample]) -> list[torch.Tensor]:
        """Old log-probs of every sample: the sampler's where they belong to the trained ids, else recomputed
        (hinted members: under the unhinted prompt, see ``trace_train.grpo.hints``)."""
        cfg = self.cfg
        use_sampler = cfg.old_logprobs == "sampler"
        missing = [i for i, s in enumerate(samples) if not use_sampler or s.sampler_logprobs is None]
        recomputed = sequence_logprobs(
            self.model, [samples[i] for i in missing], cfg.micro_batch_size, cfg.temperature, self.pad_id, cfg.packing
        ) if missing else []
        out = dict(zip(missing, recomputed))
        return [out[i] if i in out else torch.tensor(s.sampler_logprobs, dtype=torch.float32)
                for i, s in enumerate(samples)]

    # ------------------------------------------------------------------- train
    def train(self) -> TrainResult:
        """Run the remaining iterations, checkpointing every ``checkpoint_every`` and at the end."""
        cfg = self.cfg
        history: list[dict[str, Any]] = []
        adapter_dir: Path | None = None
        progress = None
        if self.is_main and cfg.progress:
            from rich.progress import Progress

            progress = Progress(transient=False)
            progress.start()
            task = progress.add_task(f"GRPO {self.adapter}", total=cfg.iterations, completed=self.start_iteration)
        try:
            for iteration in range(self.start_iteration, cfg.iterations):
                metrics = self.run_iteration(iteration)
                history.append(metrics)
                done = iteration + 1
                if self.metrics is not None:
                    self.metrics.log(iteration, metrics)
                if done % cfg.checkpoint_every == 0 or done == cfg.iterations:
                    if self.is_main:
                        # the version first: a kill between the two replays this iteration and republishes it,
                        # where a checkpoint written first would resume past a version never written
                        adapter_dir = save_adapter(
                            self.model, self.adapter, versioned_dir(self.output_dir, self.adapter, done)
                        )
                        save_checkpoint(self.output_dir, done, self.model, self.adapter, self.optimizer)
                    dist.barrier()
                if progress is not None:
                    progress.update(
                        task, advance=1, description=f"GRPO {self.adapter} reward={metrics['reward_mean']:.3f}"
                    )
        finally:
            if progress is not None:
                progress.stop()
            if self.metrics is not None:
                self.metrics.close()
        final = versioned_dir(self.output_dir, self.adapter, cfg.iterations)
        if adapter_dir is None and final.exists():  # resumed from the last checkpoint: nothing left to train
            adapter_dir = final
        return TrainResult(iterations=cfg.iterations, adapter_dir=adapter_dir, history=history)

    def _publish_missing_version(self) -> None:
        """The adapter of the checkpoint resumed from, as ``adapters/<name>/v<iteration>``, when a run killed
        between writing that checkpoint and that version (runs made before the version came first) lacks it."""
        target = versioned_dir(self.output_dir, self.adapter, self.start_iteration)
        if self.is_main and not target.exists():
            logger.warning("checkpoint of iteration %d has no adapter version %s; writing it from the checkpoint",
                           self.start_iteration, target)
            save_adapter(self.model, self.adapter, target)
