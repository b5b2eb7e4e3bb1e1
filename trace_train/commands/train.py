"""``trace-rl train env=<id> adapter=<name> model.name_or_path=<hf dir> [grpo.<key>=...]``.

Trains one LoRA adapter with seeded-group GRPO (``grpo.mode=sft``: SFT on successful rollouts) on a
registered env or a weighted mixture, with the local ``hf`` rollout backend. Everything that can be
checked (config keys and values, env ids, adapter/output-dir clash) is checked before the model
loads. The model group gives ``model.name_or_path`` and ``model.dtype`` only: train loads that model (or the
bootstrapped ``tiny_policy_dir``) and never builds one, so another ``model.preset`` / ``seed`` / ``tokenizer`` is
refused. Under ``torchrun`` the groups are split across ranks (gloo on CPU, nccl on GPU).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

import trace_train.paths
from trace_train.commands._app import command_app

logger = logging.getLogger(__name__)


def _maybe_init_distributed(device: str) -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")


DTYPES = ("float32", "bfloat16", "float16")
READ_MODEL_KEYS = ("name_or_path", "dtype")  # the only keys of the model group train reads


def check_model_group(cfg: DictConfig) -> str:
    """The model group's dtype; :class:`ValueError` when a key train does not read (``preset``, ``seed``,
    ``tokenizer``: train never builds a model, it loads ``model.name_or_path`` or the bootstrapped
    ``tiny_policy_dir``) differs from the embedded default's (conf/model/tiny.yaml) or null."""
    default = OmegaConf.load(trace_train.paths.CONF_DIR / "model" / "tiny.yaml")
    given = OmegaConf.to_container(cfg.model, resolve=True) or {}
    for key, value in given.items():
        if key in READ_MODEL_KEYS or value is None or value == OmegaConf.to_container(default).get(key):
            continue
        raise ValueError(f"model.{key}={value} is not read by train: it loads model.name_or_path (or, when that is "
                         "null, the bootstrapped base tiny_policy_dir) as it is; build another base with `trace-rl "
                         f"bootstrap` and pass model.name_or_path=<its directory>, or drop model.{key}")
    dtype = str(given.get("dtype") or "float32")
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r}: choose one of {', '.join(DTYPES)}")
    return dtype


@command_app("train")
def main(cfg: DictConfig) -> None:
    console = Console()
    try:
        import trace_envs  # noqa: F401  (registers the trace/ ids)
    except ImportError:
        logger.info("trace_envs not importable; only already-registered env ids are available")
    from trace_train.commands._env_refs import resolve_cfg_envs
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import (
        ConfigError,
        check_bool,
        check_counts,
        check_env_kwargs,
        check_groups,
        env_kwargs_dict,
        fail,
        model_dir,
    )
    from trace_train.grpo import GRPOConfig, GRPOTrainer
    from trace_train.grpo.checkpoint import check_resumable, check_resume_config
    from trace_train.grpo.config import ADDED_LATER, check_output_dir, check_reset_options, normalize_envs

    try:
        check_multirun_output(cfg, "output_dir", "runs/sweep/${hydra:job.num}", "its adapter")
        output_dir = Path(to_absolute_path(str(cfg.output_dir)))
        resume = check_bool(cfg, "resume")
        dtype = check_model_group(cfg)
        adapter = cfg.adapter
        if not isinstance(adapter, str) or not adapter or "@" in adapter or "/" in adapter:
            raise ConfigError(f"adapter={adapter!r}: an adapter name must be non-empty and contain neither '@' nor "
                              "'/'; set adapter=<name>")
        env_kwargs = env_kwargs_dict(cfg.get("env_kwargs"))
        env = OmegaConf.to_container(cfg.env, resolve=True) if OmegaConf.is_config(cfg.env) else str(cfg.env)
        check_groups(cfg, "grpo")
        check_counts(cfg, {"rollout.max_turns": 1, "rollout.max_context": 1, "rollout.max_batch": 1})
        gcfg = GRPOConfig.from_mapping(OmegaConf.to_container(cfg.grpo, resolve=True))
        gcfg.validate()
        envs = normalize_envs(env)
        resolve_cfg_envs(cfg, list(envs))
        check_env_kwargs(list(envs), env_kwargs)
        check_reset_options(gcfg, list(envs), env_kwargs)  # before the model loads
        check_output_dir(output_dir, str(cfg.adapter), resume)
        if resume and check_resumable(output_dir, str(cfg.adapter)) is not None:
            check_resume_config(output_dir, gcfg.to_dict(), envs, added_later=ADDED_LATER)
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
        str(source), device=str(cfg.device), dtype=getattr(torch, dtype)
    )
    rollout_kw = {k: v for k, v in OmegaConf.to_container(cfg.rollout, resolve=True).items() if v is not None}

    def backend_factory(peft_model: torch.nn.Module) -> HFRolloutBackend:
        return HFRolloutBackend(
            peft_model, tokenizer, threads=max(gcfg.threads, 1), device=str(cfg.device), **rollout_kw
        )

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    try:  # a resume onto another base, dtype, env kwargs or rollout options is refused once the model is here
        trainer = GRPOTrainer(
            model,
            backend_factory,
            gcfg,
            env=envs,
            adapter=str(cfg.adapter),
            output_dir=output_dir,
            resume=resume,
            env_kwargs=env_kwargs,
            pad_id=pad_id,
        )
    except ValueError as exc:
        fail("train", str(exc))
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
