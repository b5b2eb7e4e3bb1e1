"""``trace-rl compose base=<hf dir> adapters=[dir1,dir2] data=<jsonl> out=<dir>``.

Trains the token-level MoE gates of :class:`trace_moe.ComposedModel` over frozen capability LoRA
adapters (paper §5.2), reports routing on held-out examples, and saves the composition
(``compose.json`` + ``gates.safetensors``) plus ``compose_metrics.json`` to ``out``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

import trace_train.paths
from trace_moe import ComposedModel, GateConfig, GateTrainConfig, read_examples, routing_report, train_gates
from trace_moe.adapters import load_adapters
from trace_train.trajectory import write_json_atomic

logger = logging.getLogger(__name__)


def _split(examples: list, frac: float, seed: int) -> tuple[list, list]:
    if frac <= 0 or len(examples) < 2:
        return examples, []
    order = np.random.default_rng(seed).permutation(len(examples))
    n_held = max(1, round(frac * len(examples)))
    held = {int(i) for i in order[:n_held]}
    return [e for i, e in enumerate(examples) if i not in held], [examples[i] for i in sorted(held)]


@hydra.main(config_path=str(trace_train.paths.CONF_DIR), config_name="compose", version_base=None)
def main(cfg: DictConfig) -> None:
    torch.set_num_threads(int(cfg.threads))
    adapter_dirs = [to_absolute_path(p) for p in cfg.adapters]
    names = list(cfg.adapter_names) if cfg.adapter_names else None
    adapters = load_adapters(adapter_dirs, names)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(to_absolute_path(cfg.base), dtype=getattr(torch, cfg.dtype))
    composed = ComposedModel(model.to(cfg.device), adapters, GateConfig(**OmegaConf.to_container(cfg.moe.gate)))
    slots = composed.slot_names
    examples = read_examples(to_absolute_path(cfg.data), slots, cfg.only_successful, cfg.capability_key)
    if cfg.held_out:
        train, held = examples, read_examples(to_absolute_path(cfg.held_out), slots, cfg.only_successful,
                                              cfg.capability_key)
    else:
        train, held = _split(examples, float(cfg.held_out_frac), int(cfg.split_seed))
    train_cfg = GateTrainConfig(**OmegaConf.to_container(cfg.moe.train))
    console = Console()
    console.print(f"training {composed.num_layers} gates over slots {slots} on {len(train)} examples "
                  f"({composed.check_trainable().trainable:,} trainable parameters)")
    metrics = train_gates(composed, train, train_cfg)
    out = Path(to_absolute_path(cfg.out))
    composed.save(out)
    result = {"train": metrics.to_dict(), "num_train": len(train), "num_held_out": len(held)}
    if held:
        report = routing_report(composed, held, pad_id=train_cfg.pad_id, max_len=train_cfg.max_len)
        result["routing"] = report.to_dict()
        table = Table("slot", "load", title=f"held-out routing: token acc {report.token_accuracy:.3f}, "
                                            f"episode acc {report.episode_accuracy:.3f}, entropy {report.entropy:.3f}")
        for name, load in zip(report.slot_names, report.load):
            table.add_row(name, f"{load:.3f}")
        console.print(table)
    write_json_atomic(out / "compose_metrics.json", result)
    console.print(f"saved composition to {out}")


if __name__ == "__main__":
    main()
