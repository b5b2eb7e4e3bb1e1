"""LoRA adapters, in one place: attach, freeze the base, prove it, save versioned, load.

Adapters are stored in the standard PEFT layout (``adapter_config.json`` +
``adapter_model.safetensors``) so ``PeftModel.from_pretrained`` and vLLM's ``--enable-lora`` can
load them. Versions live at ``<root>/adapters/<name>/v<iteration:04d>``; the matching hot-swap name
is ``<name>@<iteration>``. KL to the base is computed with ``with model.disable_adapter():``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file

from trace_envs.atomic_io import publish_dir, set_plain_write_modes

logger = logging.getLogger(__name__)

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass
class LoraSettings:
    """LoRA hyper-parameters (paper: r = 16, α = 16, dropout 0, attention projections)."""

    r: int = 16
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    init_seed: int = 0

    def peft_config(self) -> LoraConfig:
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )


def attach_adapter(model: torch.nn.Module, name: str, settings: LoraSettings | None = None) -> PeftModel:
    """Attach a new trainable LoRA adapter ``name``; every other parameter is frozen.

    The adapter's random init (LoRA A) is drawn from ``settings.init_seed`` inside a forked RNG, so the
    global torch RNG is untouched and two processes build identical adapters. Where peft maps targets onto
    parameters rather than modules (``target_parameters``: the fused experts of a Qwen3-MoE base under
    transformers >= 5), one warning says so: such an adapter trains, but trace_moe cannot compose it.
    """
    settings = settings or LoraSettings()
    if "@" in name or "/" in name or not name:
        raise ValueError(f"adapter name {name!r} must be non-empty and contain neither '@' nor '/'")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.init_seed)
        if isinstance(model, PeftModel):
            if name in model.peft_config:
                raise ValueError(f"the model already has an adapter named {name!r}")
            model.add_adapter(name, settings.peft_config())
        else:
            model = get_peft_model(model, settings.peft_config(), adapter_name=name)
    on_parameters = sorted(getattr(model.peft_config[name], "target_parameters", None) or [])
    if on_parameters:
        logger.warning("adapter %r: peft maps part of target_modules %s onto the parameters %s (fused MoE "
                       "experts): the adapter trains, but trace_moe cannot gate LoRA on parameters, so it will not "
                       "compose; for composable adapters target linear modules only (e.g. grpo.lora.target_modules="
                       "[q_proj,k_proj,v_proj,o_proj], the grpo default)", name, list(settings.target_modules),
                       on_parameters)
    model.set_adapter(name)
    freeze_all_but(model, name)
    return model


def _is_lora_param(param_name: str, adapter: str | None = None) -> bool:
    if "lora_" not in param_name:
        return False
    return adapter is None or f".{adapter}." in param_name or param_name.endswith(f".{adapter}")


def freeze_all_but(model: torch.nn.Module, adapter: str) -> None:
    """Make exactly the LoRA parameters of ``adapter`` trainable."""
    for pname, param in model.named_parameters():
        param.requires_grad_(_is_lora_param(pname, adapter))


def trainable_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def assert_only_lora_trainable(model: torch.nn.Module, adapter: str) -> int:
    """Raise if any trainable parameter is not a LoRA weight of ``adapter``; return the trainable count."""
    params = trainable_parameters(model)
    offenders = [n for n, _ in params if not _is_lora_param(n, adapter)]
    if offenders:
        raise RuntimeError(f"{len(offenders)} non-LoRA parameters are trainable, e.g. {offenders[:3]}")
    if not params:
        raise RuntimeError(f"adapter {adapter!r} has no trainable parameters")
    return sum(p.numel() for _, p in params)


def base_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 over every non-LoRA parameter and buffer (names, shapes, bytes): equal ⇔ base unchanged."""
    digest = hashlib.sha256()
    tensors: Iterable[tuple[str, torch.Tensor]] = list(model.named_parameters()) + list(model.named_buffers())
    for pname, tensor in sorted(tensors, key=lambda item: item[0]):
        if "lora_" in pname:
            continue
        digest.update(pname.encode())
        data = tensor.detach().cpu().contiguous()
        digest.update(str(tuple(data.shape)).encode() + str(data.dtype).encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def versioned_dir(root: str | os.PathLike, name: str, iteration: int) -> Path:
    """``<root>/adapters/<name>/v<iteration:04d>``."""
    return Path(root) / "adapters" / name / f"v{iteration:04d}"


def versioned_name(name: str, iteration: int) -> str:
    """The serving name of one adapter version, e.g. ``precondition@40``."""
    return f"{name}@{iteration}"


def adapter_state_dict(model: PeftModel, name: str) -> dict[str, torch.Tensor]:
    """The adapter's weights in PEFT's on-disk naming (no adapter name in the keys)."""
    return {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}


def save_adapter(model: PeftModel, name: str, directory: str | os.PathLike) -> Path:
    """Write adapter ``name`` in PEFT format to ``directory`` atomically (temp dir + rename)."""

    def write(tmp: Path) -> None:
        model.peft_config[name].save_pretrained(str(tmp))
        _sort_target_modules(tmp / "adapter_config.json")
        save_file(adapter_state_dict(model, name), str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        set_plain_write_modes(tmp)

    return publish_dir(directory, write)


def _sort_target_modules(config_path: Path) -> None:
    """peft keeps ``target_modules`` as a set, so the saved order follows the process's hash seed; sort it
    so the same adapter is the same bytes in every process (a resumed run matches an uninterrupted one)."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_adapter_weights(model: PeftModel, name: str, directory: str | os.PathLike) -> None:
    """Overwrite the weights of an existing adapter ``name`` with those saved in ``directory``."""
    state = load_file(str(Path(directory) / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, state, adapter_name=name)
    missing = [k for k in getattr(result, "missing_keys", []) if _is_lora_param(k, name)]
    if missing:
        raise RuntimeError(f"adapter at {directory} lacks weights for {missing[:3]}")


def load_adapter(model: torch.nn.Module, directory: str | os.PathLike, name: str, trainable: bool = False) -> PeftModel:
    """Load a saved adapter onto ``model`` (a base model or a PeftModel) under ``name``."""
    directory = str(directory)
    if isinstance(model, PeftModel):
        if name in model.peft_config:
            raise ValueError(f"the model already has an adapter named {name!r}")
        model.load_adapter(directory, adapter_name=name, is_trainable=trainable)
        return model
    return PeftModel.from_pretrained(model, directory, adapter_name=name, is_trainable=trainable)
