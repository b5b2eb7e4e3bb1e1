"""``trace-rl train env=<id> adapter=<name> model.name_or_path=<hf dir> [grpo.<key>=...]``.

Trains one LoRA adapter with seeded-group GRPO (``grpo.mode=sft``: SFT on successful rollouts) on a
registered env or a weighted mixture, with the local ``hf`` rollout backend. Everything that can be
checked (config keys and values, env ids, adapter/output-dir clash) is checked before the model
loads. Under ``torchrun`` the groups are split across ranks (gloo on CPU, nccl on GPU).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import hydra
import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

import trace_train.paths

logger = logging.getLogger(__name__)


def _maybe_init_distributed(device: str) -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="train", version_base=None)
def main(cfg: DictConfig) -> None:
    console = Console()
    try:
        import trace_envs  # noqa: F401  (registers the trace/ ids)
    except ImportError:
        logger.info("trace_envs not importable; only already-registered env ids are available")
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._validate import ConfigError, check_counts, check_groups, fail, model_dir
    from trace_train.grpo import GRPOConfig, GRPOTrainer
    from trace_train.grpo.checkpoint import check_resumable, check_resume_config
    from trace_train.grpo.config import check_hint_support, check_output_dir, normalize_envs

    output_dir = Path(to_absolute_path(str(cfg.output_dir)))
    try:
        env = OmegaConf.to_container(cfg.env, resolve=True) if OmegaConf.is_config(cfg.env) else str(cfg.env)
        check_groups(cfg, "grpo")
        check_counts(cfg, {"rollout.max_turns": 1, "rollout.max_context": 1, "rollout.max_batch": 1})
        gcfg = GRPOConfig.from_mapping(OmegaConf.to_container(cfg.grpo, resolve=True))
        gcfg.validate()
        envs = normalize_envs(env)
        resolve_cfg_envs(cfg, list(envs))
        if gcfg.hint_fraction > 0:  # before the model loads
            check_hint_support(list(envs), OmegaConf.to_container(cfg.env_kwargs, resolve=True) or {})
        check_output_dir(output_dir, str(cfg.adapter), bool(cfg.resume))
        if cfg.resume and check_resumable(output_dir, str(cfg.adapter)) is not None:
            check_resume_config(output_dir, gcfg.to_dict(), envs)
        if cfg.model.get("name_or_path"):
            source = model_dir(cfg.model.name_or_path, "model.name_or_path")
        elif cfg.get("tiny_policy_dir"):
            source = model_dir(cfg.tiny_policy_dir, "tiny_policy_dir")
        else:
            raise ConfigError("needs a base policy: set model.name_or_path=<hf model directory>")
    except (ValueError, KeyError) as exc:  # KeyError: a missing key or an unresolvable ${shipped:...}
        fail("train", str(exc))

    from trace_train.model.factory import load_policy
    from trace_train.rollout.hf import HFRolloutBackend

    _maybe_init_distributed(str(cfg.device))
    model, tokenizer = load_policy(
        str(source), device=str(cfg.device), dtype=getattr(torch, str(cfg.model.get("dtype", "float32")))
    )
    rollout_kw = {k: v for k, v in OmegaConf.to_container(cfg.rollout, resolve=True).items() if v is not None}

    def backend_factory(peft_model: torch.nn.Module) -> HFRolloutBackend:
        return HFRolloutBackend(
            peft_model, tokenizer, threads=max(gcfg.threads, 1), device=str(cfg.device), **rollout_kw
        )

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    trainer = GRPOTrainer(
        model,
        backend_factory,
        gcfg,
        env=envs,
        adapter=str(cfg.adapter),
        output_dir=output_dir,
        resume=bool(cfg.resume),
        env_kwargs=OmegaConf.to_container(cfg.env_kwargs, resolve=True) or {},
        pad_id=pad_id,
    )
    result = trainer.train()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if result.history:
        last = result.history[-1]
        console.print(
            f"adapter [bold]{cfg.adapter}[/bold]: reward {last['reward_mean']:.3f}, success {last['success_rate']:.2f} "
            f"after {result.iterations} iterations -> {result.adapter_dir}"
        )


if __name__ == "__main__":
    main()
