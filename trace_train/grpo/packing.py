"""Sequence packing for the GRPO update: several sequences in one row, attention kept inside each.

``packed_attention(model, lengths)`` temporarily routes a transformers model's attention through a
variable-length kernel: the row is cut at the sequence boundaries and each piece runs causal
``scaled_dot_product_attention`` on its own, so no token attends across a boundary and no
(block-diagonal, mostly masked) ``L × L`` attention is computed. The position ids of each sequence
restart at 0 (the caller passes them), so every token sees exactly what it sees in a padded batch.

The kernel is registered in transformers' ``AttentionInterface`` under ``VARLEN_ATTENTION``; the
model's ``config._attn_implementation`` is switched to it for the duration of the ``with`` block and
restored afterwards (not safe while another thread runs the same model). After the block the number
of attention calls is checked against the model's layers: a model whose attention does not dispatch
through the interface fails loudly instead of silently attending across sequences.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

VARLEN_ATTENTION = "trace_varlen_sdpa"
PACKING_MODES = ("none", "bucketed", "packed")
_HAS_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)
_state = threading.local()
_registered = False


class PackingUnsupported(RuntimeError):
    """The model cannot run packed sequences (its attention bypasses transformers' attention interface)."""


def _varlen_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention inside each packed segment: ``(1, H, N, D)`` in, ``(1, N, H, D)`` out."""
    bounds: list[int] | None = getattr(_state, "bounds", None)
    if bounds is None:
        raise PackingUnsupported(f"{VARLEN_ATTENTION} attention ran outside packed_attention()")
    if query.shape[0] != 1 or query.shape[2] != bounds[-1] or key.shape[2] != bounds[-1]:
        raise PackingUnsupported(
            f"packed attention expects one row of {bounds[-1]} tokens (no KV cache), got query "
            f"{tuple(query.shape)} and key {tuple(key.shape)}"
        )
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise PackingUnsupported(f"packed attention does not implement {name}={kwargs[name]!r}")
    gqa = query.shape[1] != key.shape[1]
    if gqa and not _HAS_GQA:
        rep = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    extra = {"enable_gqa": True} if gqa and _HAS_GQA else {}
    sizes = [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    # torch.split (not slicing): its backward concatenates the pieces' gradients instead of summing full-size zeros
    pieces = zip(torch.split(query, sizes, dim=2), torch.split(key, sizes, dim=2), torch.split(value, sizes, dim=2))
    outs = []
    for (q, k, v), start, end in zip(pieces, bounds[:-1], bounds[1:]):
        # a mask built by older transformers versions is the plain causal one: its diagonal block is the segment's
        mask = None if attention_mask is None else attention_mask[..., start:end, start:end]
        outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling,
                                                   is_causal=mask is None, **extra))
    _state.calls += 1
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


def _register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(VARLEN_ATTENTION, _varlen_sdpa)
        _registered = True


def _hf_config(model: torch.nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise PackingUnsupported(
            f"{type(model).__name__} has no transformers config with an attention implementation; "
            "use grpo.packing=bucketed or none"
        )
    return config


@contextmanager
def packed_attention(model: torch.nn.Module, lengths: Sequence[int]) -> Iterator[None]:
    """Within the block, ``model``'s forward on one row of ``sum(lengths)`` tokens attends per sequence.

    Raises ``PackingUnsupported`` for gradient checkpointing (the recomputed forward would run outside
    the block) and, after the block, when the model's layers did not all call the packed kernel."""
    if not lengths or min(lengths) < 1:
        raise ValueError(f"packed_attention needs >= 1 sequence of >= 1 token, got lengths {list(lengths)}")
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        raise PackingUnsupported("packing does not support gradient checkpointing; use grpo.packing=bucketed")
    if getattr(_state, "bounds", None) is not None:
        raise RuntimeError("packed_attention() blocks cannot be nested")
    config = _hf_config(model)
    _register()
    previous = config._attn_implementation
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + int(n))
    config._attn_implementation = VARLEN_ATTENTION
    _state.bounds, _state.calls = bounds, 0
    try:
        yield
        calls = _state.calls
    finally:
        config._attn_implementation = previous
        _state.bounds = None
    layers = getattr(config, "num_hidden_layers", None)
    if calls == 0 or (isinstance(layers, int) and calls != layers):
        raise PackingUnsupported(
            f"{type(model).__name__} ran {calls} packed attention calls for {layers} layers: its attention does not "
            "dispatch through transformers' AttentionInterface, so packed sequences would see each other; "
            "use grpo.packing=bucketed or none"
        )


def packed_hidden_states(body: torch.nn.Module, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
    """The decoder stack's final hidden states of ``sequences`` run as ONE packed row, returned right-padded
    ``(B, L, H)`` (zeros past each sequence's end), exactly the layout a padded batch gives.

    ``body`` is the decoder (``model.model`` of a causal LM). Mathematically equal to the padded forward; the
    floats differ in rounding only (a different attention kernel and no padded rows)."""
    device = next(body.parameters()).device
    lengths = [len(s) for s in sequences]
    flat, positions = packed_row(sequences, device)
    with packed_attention(body, lengths):
        hidden = body(input_ids=flat, position_ids=positions, use_cache=False).last_hidden_state[0]
    rows = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.as_tensor(lengths, device=device))
    out = hidden.new_zeros(len(lengths), max(lengths), hidden.shape[-1])
    return out.index_put((rows, positions[0]), hidden)


def packed_row(sequences: Sequence[Sequence[int]],
               device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, position_ids)``, each ``(1, N)``: the sequences concatenated, positions restarting at 0 for each."""
    flat = torch.as_tensor([t for s in sequences for t in s], dtype=torch.long, device=device).unsqueeze(0)
    positions = torch.cat([torch.arange(len(s), device=device) for s in sequences]).unsqueeze(0)
    return flat, positions


def bucket_order(lengths: Sequence[int], indices: Sequence[int]) -> list[int]:
    """``indices`` sorted by their sequence length (stable), so micro-batches cut from it pad little."""
    return sorted(indices, key=lambda i: lengths[i])
