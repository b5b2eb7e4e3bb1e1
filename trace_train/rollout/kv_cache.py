"""A KV cache that grows by doubling instead of concatenating at every decode step.

transformers' ``DynamicLayer`` does ``torch.cat`` of the whole cache per token, which on CPU costs
more than the tiny model's forward pass at 1–2 k-token contexts. ``GrowingLayer`` keeps a
preallocated buffer and writes each step in place; keys/values handed to attention are views.
Used through ``make_cache()``; on transformers versions without the layered cache API it returns
``None`` and the model builds its default cache.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)

try:  # transformers >= 5 layered cache API
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:  # pragma: no cover - older transformers
    Cache = DynamicLayer = None  # type: ignore[assignment,misc]


if DynamicLayer is not None:

    class GrowingLayer(DynamicLayer):  # type: ignore[misc,valid-type]
        """``DynamicLayer`` with amortised O(1) appends (capacity doubles when full)."""

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            self._kbuf: torch.Tensor | None = None
            self._vbuf: torch.Tensor | None = None
            self._len = 0

        def _ensure(self, key_states: torch.Tensor, value_states: torch.Tensor, need: int) -> None:
            if self._kbuf is not None and need <= self._kbuf.shape[-2]:
                return
            cap = max(need, 2 * (self._kbuf.shape[-2] if self._kbuf is not None else 0), 64)
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


def make_cache() -> Any:
    """A fresh growing KV cache, or ``None`` (model default) when the API is unavailable."""
    if Cache is None:
        return None
    return Cache(layer_class_to_replicate=GrowingLayer)
