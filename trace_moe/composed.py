"""ComposedModel: a Hugging Face causal LM with token-level gates over N frozen LoRA adapters.

The composition is installed in place: every projection the adapters target is replaced by a
:class:`~trace_moe.gated_lora.GatedLoRALinear`, and a forward hook on each decoder block's input
layernorm runs that block's gate. ``generate`` is the model's own HF ``generate``: gates route every
new token, also during incremental decoding with a KV cache.

``save(dir)`` writes ``compose.json`` (base, gate settings, adapter paths + content hashes) and
``gates.safetensors``; ``load(dir)`` refuses adapters whose content hash changed.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trace_moe.adapters import (
    LoraAdapter,
    adapted_modules,
    check_compatible,
    default_adapter_name,
    hash_adapter_dir,
    load_adapters,
)
from trace_moe.gated_lora import (
    BlockGate,
    GateConfig,
    GatedLoRALinear,
    RoutingControl,
    TrainableReport,
    check_only_gates_trainable,
)

logger = logging.getLogger(__name__)

COMPOSE_JSON = "compose.json"
GATES_FILE = "gates.safetensors"
EXTEND_MARGIN = 1.0  # how far below the mean of the existing slots' logits a new slot starts (ComposedModel.extend)
FORMAT_VERSION = 1


def find_decoder_blocks(model: nn.Module, norm_attr: str = "input_layernorm") -> tuple[str, nn.ModuleList]:
    """Locate the decoder blocks: the longest ``nn.ModuleList`` whose every child has ``norm_attr``.

    Works for Qwen2/Qwen3/Qwen3-MoE/Llama/Mistral-style models (``model.layers[i].input_layernorm``).
    """
    best: tuple[str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if (isinstance(module, nn.ModuleList) and len(module) > 0
                and all(hasattr(m, norm_attr) for m in module)
                and (best is None or len(module) > len(best[1]))):
            best = (name, module)
    if best is None:
        raise ValueError(f"no decoder blocks found: no nn.ModuleList whose children all have {norm_attr!r}")
    return best


class ComposedModel(nn.Module):
    """Base causal LM + N frozen LoRA adapters + one trainable gate per decoder block.

    Slot 0 is the base model (no adapter); slot i (1..N) is ``adapters[i - 1]``.
    """

    def __init__(self, model: nn.Module, adapters: Sequence[LoraAdapter], gate_config: GateConfig | None = None,
                 norm_attr: str = "input_layernorm") -> None:
        super().__init__()
        check_compatible(adapters)
        _warn_base_mismatch(str(getattr(model, "name_or_path", "") or ""), adapters)
        self.gate_config = gate_config or GateConfig()
        self.norm_attr = norm_attr
        self.adapters = list(adapters)
        self.control = RoutingControl()
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model
        prefix, blocks = find_decoder_blocks(model, norm_attr)
        self.num_layers = len(blocks)
        first_norm = getattr(blocks[0], norm_attr)
        ref = next(first_norm.parameters(), None)
        hidden = ref.shape[0] if ref is not None else int(model.config.hidden_size)
        device = ref.device if ref is not None else torch.device("cpu")
        self.hidden_size = int(hidden)
        self.gates = nn.ModuleList(
            BlockGate(hidden, self.num_slots, self.gate_config, self.control, i).to(device)
            for i in range(self.num_layers)
        )
        self._hooks = [
            getattr(block, norm_attr).register_forward_hook(gate.hook) for block, gate in zip(blocks, self.gates)
        ]
        self._install(prefix)

    # ------------------------------------------------------------------ construction
    def _install(self, prefix: str) -> None:
        module_names = adapted_modules(self.adapters)
        block_prefix = f"{prefix}." if prefix else ""
        for name in module_names:
            rest = name[len(block_prefix):] if name.startswith(block_prefix) else None
            if rest is None or not rest.split(".", 1)[0].isdigit():
                raise ValueError(f"adapted module {name!r} is not inside the decoder blocks {prefix!r}")
            layer = int(rest.split(".", 1)[0])
            try:
                base = self.model.get_submodule(name)
            except AttributeError as exc:
                raise ValueError(f"adapted module {name!r} does not exist in the base model") from exc
            parent_name, _, child = name.rpartition(".")
            pairs = [ad.weights.get(name) or _zero_lora(base, ad.rank) for ad in self.adapters]
            wrapped = GatedLoRALinear(
                base,
                [a for a, _ in pairs],
                [b for _, b in pairs],
                [ad.scale for ad in self.adapters],
                self.gates[layer],
            )
            setattr(self.model.get_submodule(parent_name), child, wrapped)
        self.adapted_modules = module_names
        logger.info("composed %d adapters over %d projections in %d blocks",
                    len(self.adapters), len(module_names), self.num_layers)

    @classmethod
    def from_pretrained(cls, base: str | Path, adapter_dirs: Sequence[str | Path],
                        gate_config: GateConfig | None = None, adapter_names: Sequence[str] | None = None,
                        torch_dtype: torch.dtype | None = None, norm_attr: str = "input_layernorm") -> ComposedModel:
        """Load an HF causal LM from ``base`` and compose the peft adapters in ``adapter_dirs``."""
        from transformers import AutoModelForCausalLM

        adapters = load_adapters(adapter_dirs, adapter_names)
        kwargs = {"dtype": torch_dtype} if torch_dtype is not None else {}
        model = AutoModelForCausalLM.from_pretrained(str(base), **kwargs)
        return cls(model, adapters, gate_config, norm_attr)

    # ------------------------------------------------------------------ use
    @property
    def num_slots(self) -> int:
        return len(self.adapters) + 1

    @property
    def slot_names(self) -> list[str]:
        """``['base', <adapter names>...]``: the name of each slot."""
        return ["base"] + [a.name for a in self.adapters]

    def slot_of(self, name: str | None) -> int:
        """Slot index of an adapter name; ``None``/'base'/'none' mean slot 0."""
        if name is None or name in ("base", "none", ""):
            return 0
        names = self.slot_names
        if name not in names:
            raise KeyError(f"unknown adapter {name!r}; slots are {names}")
        return names.index(name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """HF ``generate`` of the underlying model; gates act on every token."""
        return self.model.generate(*args, **kwargs)

    @contextlib.contextmanager
    def forcing(self, slots: int | torch.Tensor | None) -> Iterator[None]:
        """Route all tokens to ``slots`` (int, per-sequence (B,) or per-token (B, T)) with g = 1."""
        previous = self.control.forced
        self.control.forced = slots
        try:
            yield
        finally:
            self.control.forced = previous

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Keep each gate's (detached) input of the last forward pass in ``gate.last_input``."""
        previous = self.control.capture_inputs
        self.control.capture_inputs = True
        try:
            yield
        finally:
            self.control.capture_inputs = previous

    @contextlib.contextmanager
    def disabling(self, slots: Sequence[int]) -> Iterator[None]:
        """The gates route as if ``slots`` did not exist (their logits are -inf): e.g. the composition
        before a slot was added."""
        previous = self.control.disabled_slots
        self.control.disabled_slots = tuple(int(s) for s in slots)
        try:
            yield
        finally:
            self.control.disabled_slots = previous

    def gate_parameters(self) -> list[nn.Parameter]:
        return list(self.gates.parameters())

    def check_trainable(self) -> TrainableReport:
        """Assert only gate parameters train; returns the trainable/frozen counts."""
        return check_only_gates_trainable(self, "gates.")

    def layer_logits(self) -> list[torch.Tensor]:
        """Gate logits (B, T, N + 1) of every block from the last forward pass."""
        out = [g.last_logits for g in self.gates]
        if any(o is None for o in out):
            raise RuntimeError("no forward pass has run through every gate yet")
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ persistence
    def save(self, out_dir: str | Path) -> Path:
        """Write gate weights (safetensors) and ``compose.json`` with adapter references + hashes.

        Each file is written atomically, and ``compose.json`` (what marks a composition complete: ``load``
        refuses a folder without it) goes first and comes back last, so an interrupted save over an earlier
        composition never leaves new gates beside the old ``compose.json``."""
        from safetensors.torch import save

        from trace_envs.atomic_io import write_bytes_atomic

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.gates.state_dict().items()}
        (out / COMPOSE_JSON).unlink(missing_ok=True)
        write_bytes_atomic(out / GATES_FILE, save(state))
        meta = {
            "format_version": FORMAT_VERSION,
            "base_model": _base_reference(str(getattr(self.model, "name_or_path", "") or "")),
            "norm_attr": self.norm_attr,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "gate_config": asdict(self.gate_config),
            "adapters": [
                {"name": a.name, "path": a.path, "sha256": a.content_hash, "rank": a.rank, "alpha": a.alpha}
                for a in self.adapters
            ],
        }
        from trace_envs.records import write_json_atomic

        write_json_atomic(out / COMPOSE_JSON, meta)
        return out

    @classmethod
    def load(cls, in_dir: str | Path, model: nn.Module | None = None,
             adapter_paths: Sequence[str | Path] | None = None,
             torch_dtype: torch.dtype | None = None) -> ComposedModel:
        """Rebuild a saved composition; raises ``ValueError`` if an adapter's content hash changed.

        ``model`` reuses an already loaded base; otherwise the base is loaded from the recorded path.
        ``adapter_paths`` overrides the recorded adapter locations (the hashes must still match).
        """
        from safetensors.torch import load_file

        in_dir = Path(in_dir)
        if not (in_dir / COMPOSE_JSON).exists():
            raise ValueError(f"{in_dir}: no {COMPOSE_JSON}; not a directory written by trace-rl compose")
        meta = json.loads((in_dir / COMPOSE_JSON).read_text())
        if meta.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{in_dir}: compose format {meta['format_version']} is newer than this trace-rl")
        records = meta["adapters"]
        paths = list(adapter_paths) if adapter_paths is not None else [r["path"] for r in records]
        if len(paths) != len(records):
            raise ValueError(f"{len(paths)} adapter paths given, composition has {len(records)}")
        for rec, path in zip(records, paths):
            actual = hash_adapter_dir(path)
            if actual != rec["sha256"]:
                raise ValueError(
                    f"adapter {rec['name']!r} at {path} has content hash {actual[:12]}…, "
                    f"the composition was trained with {rec['sha256'][:12]}…"
                )
        adapters = load_adapters(paths, [r["name"] for r in records])
        if model is None:
            from transformers import AutoModelForCausalLM

            kwargs = {"dtype": torch_dtype} if torch_dtype is not None else {}
            model = AutoModelForCausalLM.from_pretrained(meta["base_model"], **kwargs)
        composed = cls(model, adapters, GateConfig(**meta["gate_config"]), meta.get("norm_attr", "input_layernorm"))
        state = _finite_gates(load_file(str(in_dir / GATES_FILE)), in_dir)
        composed.gates.load_state_dict(state, strict=True)
        return composed


    @classmethod
    def extend(cls, in_dir: str | Path, new_adapter: str | Path, new_name: str | None = None,
               model: nn.Module | None = None, torch_dtype: torch.dtype | None = None) -> ComposedModel:
        """A saved composition plus one new adapter in a new last slot.

        The existing adapters are loaded from their recorded paths (content hashes verified) and left
        untouched; every gate keeps its trained rows for the existing slots, and the new slot's row
        starts as the mean of the existing rows with its bias ``EXTEND_MARGIN`` lower: its logit is the
        mean of the others' minus the margin, below their maximum for every token, so the extended model's
        top-1 routing starts exactly as the saved one's (under ``weighting: probability`` the chosen slot's
        weight drops by the new slot's softmax share until the gates are trained again; under ``selection`` the
        outputs are the saved composition's). Only top-1 compositions extend: with ``top_k > 1`` the new row
        would be some token's second choice at once.
        """
        from safetensors.torch import load_file

        in_dir = Path(in_dir)
        if not (in_dir / COMPOSE_JSON).exists():
            raise ValueError(f"{in_dir}: no {COMPOSE_JSON}; not a directory written by trace-rl compose")
        meta = json.loads((in_dir / COMPOSE_JSON).read_text())
        records = meta["adapters"]
        for rec in records:
            actual = hash_adapter_dir(rec["path"])
            if actual != rec["sha256"]:
                raise ValueError(f"adapter {rec['name']!r} at {rec['path']} changed since the composition was saved")
        name = new_name or default_adapter_name(new_adapter)
        if name in [r["name"] for r in records] or name == "base":
            raise ValueError(f"the composition already has a slot named {name!r}; pass another name")
        adapters = load_adapters([*(r["path"] for r in records), new_adapter], [*(r["name"] for r in records), name])
        if model is None:
            from transformers import AutoModelForCausalLM

            kwargs = {"dtype": torch_dtype} if torch_dtype is not None else {}
            model = AutoModelForCausalLM.from_pretrained(meta["base_model"], **kwargs)
        gate_config = GateConfig(**meta["gate_config"])
        if gate_config.top_k > 1:  # the new row would be some token's second choice at once
            raise ValueError(f"{in_dir}: extend keeps the routing of top-1 gates only (this composition routes "
                             f"top-{gate_config.top_k}); compose again over all the adapters")
        composed = cls(model, adapters, gate_config, meta.get("norm_attr", "input_layernorm"))
        state = _finite_gates(load_file(str(in_dir / GATES_FILE)), in_dir)
        old = len(records) + 1
        with torch.no_grad():
            for i, gate in enumerate(composed.gates):
                w, b = state[f"{i}.proj.weight"], state[f"{i}.proj.bias"]
                if w.shape[0] != old:
                    raise ValueError(f"{in_dir}: gate {i} has {w.shape[0]} slots, compose.json lists {old}")
                gate.proj.weight[:old] = w.to(gate.proj.weight)
                gate.proj.bias[:old] = b.to(gate.proj.bias)
                # a constant row (zero weight) can beat every trained row on some token; the mean row cannot
                gate.proj.weight[old:] = w.mean(0).to(gate.proj.weight)
                gate.proj.bias[old:] = float(b.mean()) - EXTEND_MARGIN
        logger.info("extended composition %s (%d adapters) with %r in slot %d", in_dir, len(records), name, old)
        return composed


def _zero_lora(base: nn.Module, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A and B of an adapter that does not adapt ``base``: its update there is exactly zero."""
    weight = base.weight
    return (torch.zeros(rank, weight.shape[1], dtype=weight.dtype, device=weight.device),
            torch.zeros(weight.shape[0], rank, dtype=weight.dtype, device=weight.device))


def _base_reference(base: str) -> str:
    """A local base recorded by its absolute path (a relative one would not load from another directory); a hub
    id as it is."""
    return str(Path(base).resolve()) if base and Path(base).is_dir() else base


def _finite_gates(state: dict[str, torch.Tensor], where: Path) -> dict[str, torch.Tensor]:
    """``state`` when every gate value is finite; a NaN would silently route its whole block to the base."""
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"{where}: gate weights {bad[:4]} hold NaN or inf values; the gates must be trained again")
    return state


def _warn_base_mismatch(base: str, adapters: Sequence[LoraAdapter]) -> None:
    recorded = adapters[0].base_model if adapters else ""
    if base and recorded and Path(recorded).name != Path(base).name:
        logger.warning("adapters were trained on base %r but composing onto %r", recorded, base)
