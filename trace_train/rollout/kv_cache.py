"""A KV cache that grows by doubling instead of concatenating at every decode step.

transformers' ``DynamicLayer`` does ``torch.cat`` of the whole cache per token, which on CPU costs
more than the tiny model's forward pass at 1–2 k-token contexts. ``GrowingLayer`` keeps a
preallocated buffer (``capacity``: the turn's prompt + token budget, so a turn never regrows) and
writes each step in place; keys/values handed to attention are views. Used through
``make_cache()``; on transformers versions without the layered cache API it returns ``None`` and
the model builds its default cache.

``RowCache`` is one episode's KV kept between turns: ``extract_row`` takes it out of a batched
cache (only the positions its attention mask covers) and ``cached_prefill_cache`` lays several
rows' caches out, left-padded, as the batched cache the next turn continues.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch

logger = logging.getLogger(__name__)

try:  # transformers >= 5 layered cache API
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:  # pragma: no cover - older transformers
    Cache = DynamicLayer = None  # type: ignore[assignment,misc]


if DynamicLayer is not None:

    class GrowingLayer(DynamicLayer):  # type: ignore[misc,valid-type]
        """``DynamicLayer`` with amortised O(1) appends (capacity doubles when full)."""

        def __init__(self, capacity: int = 0) -> None:
            super().__init__()
            self.capacity = int(capacity)

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            self._kbuf: torch.Tensor | None = None
            self._vbuf: torch.Tensor | None = None
            self._len = 0

        def _ensure(self, key_states: torch.Tensor, value_states: torch.Tensor, need: int) -> None:
            if self._kbuf is not None and need <= self._kbuf.shape[-2]:
                return
            cap = max(need, 2 * (self._kbuf.shape[-2] if self._kbuf is not None else 0), 64,
                      getattr(self, "capacity", 0))
            b, h, _, dk = key_states.shape
            kbuf = key_states.new_empty((b, h, cap, dk))
            vbuf = value_states.new_empty((b, h, cap, value_states.shape[-1]))
            if self._kbuf is not None and self._len:
                kbuf[:, :, : self._len] = self._kbuf[:, :, : self._len]
                vbuf[:, :, : self._len] = self._vbuf[:, :, : self._len]
            self._kbuf, self._vbuf = kbuf, vbuf

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            new = self._len + key_states.shape[-2]
            self._ensure(key_states, value_states, new)
            self._kbuf[:, :, self._len:new] = key_states
            self._vbuf[:, :, self._len:new] = value_states
            self._len = new
            self.keys, self.values = self._kbuf[:, :, :new], self._vbuf[:, :, :new]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._len if self.is_initialized else 0

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.get_seq_length() > 0:
                self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
                self.keys, self.values = self._kbuf[:, :, : self._len], self._vbuf[:, :, : self._len]

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove < 0 and self.is_initialized:
                self._len = max(0, self._len + tokens_to_remove)
                self.keys, self.values = self._kbuf[:, :, : self._len], self._vbuf[:, :, : self._len]
            else:
                super().crop(tokens_to_remove)

        def reset(self) -> None:
            self._kbuf = self._vbuf = None
            self._len = 0
            super().reset()


def make_cache(capacity: int = 0) -> Any:
    """A fresh growing KV cache (first allocation: ``capacity`` positions), or ``None`` (model default)
    when the API is unavailable."""
    if Cache is None:
        return None
    return Cache(layer_class_to_replicate=functools.partial(GrowingLayer, capacity))


@dataclass
class RowCache:
    """One episode's KV between turns: per layer ``(heads, length, head_dim)`` keys and values, covering
    the episode's first ``length`` token ids (positions baked in by the model's rotary embedding)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[-2])


def extract_row(past: Any, attention: torch.Tensor, row: int) -> RowCache | None:
    """Row ``row`` of a batched cache, without its padding; ``None`` when the cache is not ours (a
    model with its own cache type: that row is simply prefilled again next turn)."""
    layers = getattr(past, "layers", None)
    if Cache is None or not layers or not all(isinstance(layer, GrowingLayer) for layer in layers):
        return None
    idx = attention[row].nonzero().squeeze(-1)
    if attention.shape[-1] != layers[0].get_seq_length():
        raise RuntimeError(f"attention mask ({attention.shape[-1]}) and KV cache ({layers[0].get_seq_length()}) "
                           f"disagree on the sequence length")
    return RowCache(keys=[layer.keys[row].index_select(1, idx) for layer in layers],
                    values=[layer.values[row].index_select(1, idx) for layer in layers])


def cached_prefill_cache(caches: Sequence[RowCache | None], capacity: int) -> tuple[Any, torch.Tensor]:
    """A batched cache holding each row's ``RowCache`` right-aligned (left padding), and its ``(B, L)``
    attention mask (1 on cached positions). Rows without a cache are all padding."""
    if Cache is None:
        raise RuntimeError("continuing KV caches needs transformers' layered cache API")
    ref = next(c for c in caches if c is not None)
    n, width = len(caches), max(c.length if c is not None else 0 for c in caches)
    cache = make_cache(max(capacity, width))
    attention = torch.zeros((n, width), dtype=torch.long)
    for i, c in enumerate(caches):
        if c is not None:
            attention[i, width - c.length:] = 1
    for layer_idx, (k0, v0) in enumerate(zip(ref.keys, ref.values)):
        keys = k0.new_zeros((n, k0.shape[0], width, k0.shape[-1]))
        values = v0.new_zeros((n, v0.shape[0], width, v0.shape[-1]))
        for i, c in enumerate(caches):
            if c is not None and c.length:
                keys[i, :, width - c.length:] = c.keys[layer_idx]
                values[i, :, width - c.length:] = c.values[layer_idx]
        cache.update(keys, values, layer_idx)
    return cache, attention
