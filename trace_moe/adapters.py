"""Loading frozen peft LoRA adapters (``save_pretrained`` directories) that share one base model.

Every adapter of a composition must agree on the base model name and the LoRA rank; a mismatch raises a
``ValueError`` that names the offending adapter. The adapted modules may differ (one adapter on layer 1's
attention beside others on every layer's): the composition adapts their union, and an adapter leaves the modules it
does not adapt as the base has them (see :func:`adapted_modules`). Each adapter directory
gets a content hash (sha256 over its config and weight files) so a saved composition can verify that
it is reloaded with exactly the adapters it was trained on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError

logger = logging.getLogger(__name__)

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
_PEFT_PREFIX = "base_model.model."


@dataclass
class LoraAdapter:
    """One frozen LoRA adapter, held as plain tensors keyed by the base model's module name.

    ``weights[module_name] = (A, B)`` with ``A`` of shape (r, in) and ``B`` of shape (out, r);
    the adapter's update on that module is ``scale * B @ A @ x``.
    """

    name: str
    base_model: str
    rank: int
    alpha: float
    target_modules: frozenset[str]
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]
    use_rslora: bool = False
    path: str | None = None
    content_hash: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        """peft's scaling: alpha / r (alpha / sqrt(r) with rsLoRA)."""
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)


def hash_adapter_dir(path: str | Path) -> str:
    """sha256 over the adapter's config and weight files (name + bytes, sorted by name)."""
    path = Path(path)
    files = [path / CONFIG_FILE] + [path / w for w in WEIGHT_FILES if (path / w).exists()]
    digest = hashlib.sha256()
    for f in sorted(files):
        if not f.exists():
            raise ValueError(f"adapter {path}: missing {f.name}")
        digest.update(f.name.encode())
        digest.update(b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    st = path / "adapter_model.safetensors"
    if st.exists():
        from safetensors.torch import load_file

        return load_file(str(st))
    pt = path / "adapter_model.bin"
    if pt.exists():
        return torch.load(pt, map_location="cpu", weights_only=True)
    raise ValueError(f"adapter {path}: no adapter_model.safetensors or adapter_model.bin")


def _group_lora_weights(name: str, raw: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in raw.items():
        k = key.removeprefix(_PEFT_PREFIX)
        for part in ("A", "B"):
            suffix = f".lora_{part}.weight"
            if k.endswith(suffix):
                module = k[: -len(suffix)]
                pairs.setdefault(module, {})[part] = tensor
                break
        else:
            raise ValueError(f"adapter {name!r}: unsupported tensor {key!r} (only plain LoRA A/B weights)")
    out = {}
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise ValueError(f"adapter {name!r}: module {module!r} lacks lora_A or lora_B")
        out[module] = (ab["A"], ab["B"])
    return out


def default_adapter_name(path: str | Path) -> str:
    """An adapter's name when none is given: its directory's name, or, for a version directory ``v<N>`` that
    ``trace-rl train`` publishes (``<output_dir>/adapters/<name>/v0015``), the name of the folder above it."""
    path = Path(path)
    return path.parent.name if re.fullmatch(r"v\d+", path.name) and path.parent.name else path.name


def load_adapter(path: str | Path, name: str | None = None) -> LoraAdapter:
    """Read one peft LoRA directory into a :class:`LoraAdapter` (weights on CPU, frozen); a damaged or ill-shaped
    one is a ``ValueError`` naming it."""
    path = Path(path)
    name = name or default_adapter_name(path)
    try:
        return _load_adapter(path, name)
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError, SafetensorError) as exc:
        raise ValueError(f"adapter {name!r} ({path}) is damaged or not a peft LoRA directory: "
                         f"{type(exc).__name__}: {exc}") from None


def _load_adapter(path: Path, name: str) -> LoraAdapter:
    cfg_file = path / CONFIG_FILE
    if not cfg_file.exists():
        raise ValueError(f"adapter {name!r} ({path}): no {CONFIG_FILE}; not a peft adapter directory")
    cfg = json.loads(cfg_file.read_text())
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"adapter {name!r}: peft_type {cfg.get('peft_type')!r} is not LORA")
    if cfg.get("target_parameters"):  # before rank_pattern: peft sets one for these, the user did not
        raise ValueError(
            f"adapter {name!r}: LoRA on fused MoE expert parameters (target_parameters={cfg['target_parameters']}) "
            f"cannot be gated by trace_moe, which gates LoRA on linear modules only; train the adapters with "
            f"linear targets such as the attention projections (grpo.lora.target_modules=[q_proj,k_proj,v_proj,"
            f"o_proj], the grpo default)")
    if cfg.get("use_dora"):
        raise ValueError(f"adapter {name!r}: DoRA adapters are not supported")
    if cfg.get("bias", "none") != "none" or cfg.get("lora_bias"):
        raise ValueError(f"adapter {name!r}: LoRA bias terms are not supported")
    if cfg.get("modules_to_save"):
        raise ValueError(f"adapter {name!r}: modules_to_save={cfg['modules_to_save']} cannot be gated")
    if cfg.get("fan_in_fan_out"):
        raise ValueError(f"adapter {name!r}: fan_in_fan_out (Conv1D) adapters are not supported")
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise ValueError(f"adapter {name!r}: per-module rank_pattern/alpha_pattern is not supported")
    targets = cfg.get("target_modules") or []
    if isinstance(targets, str):
        raise ValueError(f"adapter {name!r}: regex target_modules {targets!r} is not supported; use a list")  # noqa: TRY004
    weights = _group_lora_weights(name, _read_weights(path))
    rank = int(cfg["r"])
    for module, (a, b) in weights.items():
        if a.shape[0] != rank or b.shape[1] != rank:
            raise ValueError(f"adapter {name!r}: module {module!r} has rank {a.shape[0]}, config says r={rank}")
    return LoraAdapter(
        name=name,
        base_model=str(cfg.get("base_model_name_or_path") or ""),
        rank=rank,
        alpha=float(cfg["lora_alpha"]),
        target_modules=frozenset(targets),
        weights=weights,
        use_rslora=bool(cfg.get("use_rslora", False)),
        path=str(path.resolve()),
        content_hash=hash_adapter_dir(path),
    )


def check_compatible(adapters: Sequence[LoraAdapter]) -> None:
    """Raise ``ValueError`` naming the first adapter whose base or rank differ from the first, or whose LoRA
    shapes on a module they share differ (the same module name on a differently shaped base)."""
    if not adapters:
        raise ValueError("at least one adapter is required")
    names = [a.name for a in adapters]
    if len(set(names)) != len(names):
        raise ValueError(f"adapter names must be unique, got {names}")
    ref = adapters[0]
    shapes: dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]] = {}
    for ad in adapters:
        if ad.base_model != ref.base_model:
            raise ValueError(
                f"adapter {ad.name!r} was trained on base {ad.base_model!r}, "
                f"but adapter {ref.name!r} on {ref.base_model!r}"
            )
        if ad.rank != ref.rank:
            raise ValueError(f"adapter {ad.name!r} has rank {ad.rank}, but adapter {ref.name!r} has rank {ref.rank}")
        for module, (a, b) in ad.weights.items():
            first = shapes.setdefault(module, (ad.name, tuple(a.shape), tuple(b.shape)))
            if first[1:] != (tuple(a.shape), tuple(b.shape)):
                raise ValueError(f"adapter {ad.name!r} has LoRA shapes A{tuple(a.shape)} B{tuple(b.shape)} on "
                                 f"{module!r}, adapter {first[0]!r} A{first[1]} B{first[2]}")


def adapted_modules(adapters: Sequence[LoraAdapter]) -> list[str]:
    """The modules a composition of ``adapters`` adapts: the union of theirs, sorted. An adapter's update on a
    module outside its own is zero, exactly as peft leaves that module when the adapter runs alone."""
    return sorted(set().union(*(ad.weights for ad in adapters)))


def load_adapters(paths: Sequence[str | Path], names: Sequence[str] | None = None) -> list[LoraAdapter]:
    """Load N adapters for the same base and check they are compatible (see :func:`check_compatible`)."""
    if names is not None and len(names) != len(paths):
        raise ValueError(f"{len(names)} names given for {len(paths)} adapters")
    adapters = [load_adapter(p, None if names is None else names[i]) for i, p in enumerate(paths)]
    check_compatible(adapters)
    return adapters
