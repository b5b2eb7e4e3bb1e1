"""How ``MessageText`` / ``MessageList`` live in ``AsyncVectorEnv``'s shared memory (registered on import).

Gymnasium dispatches ``create_shared_memory`` / ``read_from_shared_memory`` / ``write_to_shared_memory``
on the space type; without these, ``gym.make_vec(..., vectorization_mode="async")`` fails with
``CustomSpaceError`` unless ``shared_memory=False``. Each env gets one fixed slot: an 8-byte length,
then the UTF-8 text (``MessageText``) or JSON (``MessageList``). The parent reads through a live view
whose deep copy (what ``AsyncVectorEnv`` returns) is a plain tuple, as with ``shared_memory=False``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.vector.utils.shared_memory import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from trace_envs.core.spaces import MessageList, MessageText

_HEADER = 8  # little-endian uint64 length of the payload


def slot_bytes(space: MessageText | MessageList) -> int:
    """Payload capacity of one env's slot."""
    return 4 * space.max_length if isinstance(space, MessageText) else space.max_bytes


def _encode(space: MessageText | MessageList, value: Any) -> bytes:
    return (value if isinstance(space, MessageText) else json.dumps(value, ensure_ascii=False)).encode("utf-8")


def _decode(space: MessageText | MessageList, data: bytes) -> Any:
    text = data.decode("utf-8")
    if isinstance(space, MessageText):
        return text
    return json.loads(text) if text else []


class SharedSlots(Sequence):
    """Live, read-only view of the ``n`` observations in shared memory."""

    def __init__(self, space: MessageText | MessageList, buffer: Any, n: int):
        self.space, self.buffer, self.n = space, buffer, n
        self.stride = _HEADER + slot_bytes(space)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self.n)))
        if not -self.n <= index < self.n:
            raise IndexError(index)
        view = np.frombuffer(self.buffer.get_obj(), dtype=np.uint8)
        start = (index % self.n) * self.stride
        length = int(view[start: start + _HEADER].view("<u8")[0])
        return _decode(self.space, view[start + _HEADER: start + _HEADER + length].tobytes())

    def __deepcopy__(self, memo: dict) -> tuple:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedSlots({tuple(self)!r})"


@create_shared_memory.register(MessageText)
@create_shared_memory.register(MessageList)
def _create(space: MessageText | MessageList, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array("B", n * (_HEADER + slot_bytes(space)))


@read_from_shared_memory.register(MessageText)
@read_from_shared_memory.register(MessageList)
def _read(space: MessageText | MessageList, shared_memory: Any, n: int = 1) -> SharedSlots:
    return SharedSlots(space, shared_memory, n)


@write_to_shared_memory.register(MessageText)
@write_to_shared_memory.register(MessageList)
def _write(space: MessageText | MessageList, index: int, value: Any, shared_memory: Any) -> None:
    payload = _encode(space, value)
    capacity = slot_bytes(space)
    if len(payload) > capacity:
        raise ValueError(f"observation of {len(payload)} bytes exceeds the {capacity}-byte shared-memory slot of "
                         f"{space!r}; give the space a larger max_bytes or pass vector_kwargs="
                         f"{{'shared_memory': False}}")
    view = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)
    start = index * (_HEADER + capacity)
    view[start: start + _HEADER] = np.frombuffer(np.array([len(payload)], dtype="<u8").tobytes(), dtype=np.uint8)
    view[start + _HEADER: start + _HEADER + len(payload)] = np.frombuffer(payload, dtype=np.uint8)
