"""Gate-training data: tokenized sequences with a loss mask and a capability slot label."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)


@dataclass
class GateExample:
    """One sequence: ``loss_mask[t] = 1`` on assistant (policy) tokens; ``label`` is the slot to route to.

    Slot 0 is the base model, slot i >= 1 the i-th adapter. ``episode_id`` groups examples for the
    majority-per-episode routing accuracy (empty: every example is its own episode). ``token_labels``
    (optional, one per position, -1 = not trained) replaces ``label`` position by position in the gates' label
    loss and the routing report (``trace_moe.token_labels``); ``label`` stays the sequence's capability.
    """

    input_ids: list[int]
    loss_mask: list[int]
    label: int
    episode_id: str = ""
    token_labels: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(
                f"input_ids ({len(self.input_ids)}) and loss_mask ({len(self.loss_mask)}) differ in length")
        if self.label < 0:
            raise ValueError(f"label must be a slot index >= 0, got {self.label}")
        if self.token_labels is not None:
            if len(self.token_labels) != len(self.input_ids):
                raise ValueError(f"token_labels ({len(self.token_labels)}) and input_ids ({len(self.input_ids)}) "
                                 "differ in length")
            if any(t < -1 for t in self.token_labels):
                raise ValueError("token_labels are slot indices >= 0, or -1 for a position that is not trained")

    def position_labels(self) -> list[int]:
        """The slot each position's gate is trained towards (-1: not trained): ``token_labels`` when set, else
        ``label`` on the assistant tokens (on every token when the sequence has none)."""
        if self.token_labels is not None:
            return list(self.token_labels)
        mask = self.loss_mask if any(self.loss_mask) else [1] * len(self.input_ids)
        return [self.label if m else -1 for m in mask]


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T) float
    labels: torch.Tensor  # (B,)
    position_labels: torch.Tensor  # (B, T): GateExample.position_labels, -1 on padding and untrained positions


def collate(examples: Sequence[GateExample], pad_id: int = 0, max_len: int | None = None) -> Batch:
    """Right-pad a list of examples (truncated to ``max_len``) into tensors."""
    seqs = [(e.input_ids[:max_len], e.loss_mask[:max_len]) if max_len else (e.input_ids, e.loss_mask) for e in examples]
    length = max(len(s[0]) for s in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), length), dtype=torch.long)
    mask = torch.zeros((len(seqs), length), dtype=torch.float32)
    positions = torch.full((len(seqs), length), -1, dtype=torch.long)
    for i, ((s, m), example) in enumerate(zip(seqs, examples)):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        att[i, : len(s)] = 1
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
        positions[i, : len(s)] = torch.tensor(example.position_labels()[: len(s)], dtype=torch.long)
    labels = torch.tensor([e.label for e in examples], dtype=torch.long)
    return Batch(ids, att, mask, labels, positions)


def capability_from_env_id(env_id: str, slot_names: Sequence[str]) -> str | None:
    """The slot name an env id belongs to, or ``None``.

    ``trace/<capability>-v0`` and a pipeline-synthesized ``trace/<capability>-<target>-v0`` map to
    ``<capability>`` when it is a slot; the longest matching slot name wins. Slot 0 (``base``) is never
    derived: a target-env rollout must be labelled explicitly (``env_labels``).
    """
    name = str(env_id).rsplit(":", 1)[-1]  # module:id references
    name = name.rsplit("/", 1)[-1]
    name = re.sub(r"-v\d+$", "", name)
    best: str | None = None
    for slot in slot_names[1:]:
        if (name == slot or name.startswith(f"{slot}-")) and (best is None or len(slot) > len(best)):
            best = slot
    return best


def _slot_of(label: Any, slot_names: Sequence[str]) -> int:
    if isinstance(label, bool):
        raise ValueError(f"label {label!r} is not a slot")  # noqa: TRY004
    if isinstance(label, int):
        slot = label
    elif label in ("base", "none"):
        slot = 0
    elif label in slot_names:
        slot = list(slot_names).index(label)
    else:
        raise ValueError(f"capability {label!r} is not one of the slots {list(slot_names)}")
    if not 0 <= slot < len(slot_names):
        raise ValueError(f"label slot {slot} out of range for {len(slot_names)} slots")
    return slot


def example_from_record(row: Mapping[str, Any], slot_names: Sequence[str],
                        capability_key: str = "capability",
                        env_labels: Mapping[str, str] | None = None) -> GateExample | None:
    """A :class:`GateExample` from a JSON record, or ``None`` if it has no token data.

    Accepts GateExample-like rows (``input_ids``, ``loss_mask``, ``label`` as slot index or name) and
    trajectory records (``token_ids``, ``loss_mask``, ``env_id``). The label is, in order: the row's
    ``label``, ``info[capability_key]``, ``env_labels[env_id]``, or the capability named by the env id
    (:func:`capability_from_env_id`). A row whose label cannot be derived raises ``ValueError``: no row
    is ever routed to ``base`` silently (``'base'`` must be given explicitly).
    """
    ids = row.get("input_ids", row.get("token_ids"))
    mask = row.get("loss_mask")
    if not ids or mask is None:
        return None
    for key, value in (("token ids", ids), ("loss_mask", mask)):
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError(f"{key} must be a list of integers, got {str(value)[:40]!r}")
    if len(ids) != len(mask):
        raise ValueError(f"{len(ids)} token ids but {len(mask)} loss_mask entries")
    info = row.get("info")
    if info is not None and not isinstance(info, dict):
        raise ValueError(f"field 'info' must be an object, got {type(info).__name__}")
    label: Any = row.get("label")
    if label is None:
        label = (info or {}).get(capability_key)
    env_id = row.get("env_id")
    if label in (None, "") and env_id is not None:
        label = (env_labels or {}).get(str(env_id)) or capability_from_env_id(str(env_id), slot_names)
    if label in (None, ""):
        raise ValueError(
            f"cannot derive a capability label: no 'label', no info.{capability_key}, and env id {env_id!r} "
            f"names none of the adapter slots {list(slot_names[1:])}; name the adapters after their "
            f"capabilities (adapter_names=[...]) or map the env explicitly (env_labels={{'{env_id}': <slot>}})")
    episode = str(row.get("episode_id") or "")
    return GateExample(list(ids), list(mask), _slot_of(label, slot_names), episode)


def read_examples(path: str | Path, slot_names: Sequence[str], only_successful: bool = True,
                  capability_key: str = "capability",
                  env_labels: Mapping[str, str] | None = None) -> list[GateExample]:
    """Read GateExamples from a JSONL file (see :func:`example_from_record`).

    With ``only_successful`` trajectory rows whose ``success`` is false are dropped (the paper trains
    gates on successful synthetic-env rollouts only). The per-slot counts are logged.
    """
    from trace_envs.records import ReadReport, iter_jsonl_numbered

    report = ReadReport()
    out: list[GateExample] = []
    skipped = 0
    for number, row in iter_jsonl_numbered(path, report):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: a gate example must be a JSON object, got {type(row).__name__}")
        if "success" in row and not isinstance(row["success"], bool):  # "false" must not read as a success
            raise ValueError(f"{path}:{number}: field 'success' must be a bool, got {row['success']!r}")
        if only_successful and row.get("success") is False:
            skipped += 1
            continue
        try:
            ex = example_from_record(row, slot_names, capability_key, env_labels)
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from exc
        if ex is None:
            skipped += 1
            continue
        out.append(ex)
    if skipped:
        logger.info("%s: skipped %d rows (unsuccessful or without token data)", path, skipped)
    counts = Counter(slot_names[e.label] for e in out)
    logger.info("%s: %d gate examples per slot %s", path, len(out), dict(sorted(counts.items())))
    return out


def iter_batches(examples: Sequence[GateExample], batch_size: int, order: Iterable[int]) -> Iterable[list[GateExample]]:
    chunk: list[GateExample] = []
    for i in order:
        chunk.append(examples[int(i)])
        if len(chunk) == batch_size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _episode(example: GateExample, index: int) -> str:
    return example.episode_id or f"\0{index}"  # an example without an episode id is its own episode


def _held_out(examples: Sequence[GateExample], order: Sequence[int], n_held: int) -> set[int]:
    keys = {_episode(examples[int(i)], int(i)) for i in order[:n_held]}
    return {i for i, e in enumerate(examples) if _episode(e, i) in keys}


def hold_out_episodes(examples: Sequence[GateExample], order: Sequence[int], n_held: int
                      ) -> tuple[list[GateExample], list[GateExample]]:
    """``(train, held_out)``: the examples ``order[:n_held]`` held out with every other example of their episodes
    (routing-target ``label: solvers`` turns one episode into an example per solving slot, with the same tokens),
    both lists in ``order``'s order. Without repeated episodes this is a plain split of ``order`` at ``n_held``."""
    held = _held_out(examples, order, n_held)
    return ([examples[int(i)] for i in order if int(i) not in held],
            [examples[int(i)] for i in order if int(i) in held])


def split_by_episode(examples: Sequence[GateExample], frac: float, seed: int
                     ) -> tuple[list[GateExample], list[GateExample]]:
    """``(train, held_out)``: at least ``max(1, round(frac * len(examples)))`` examples held out, whole episodes at
    a time (:func:`hold_out_episodes` over a ``seed``-permuted order), always leaving one episode to train on; with
    ``frac <= 0`` or a single episode nothing is held out. Both lists keep the input order."""
    if frac <= 0 or len({_episode(e, i) for i, e in enumerate(examples)}) < 2:
        return list(examples), []
    order = np.random.default_rng(seed).permutation(len(examples))
    n_held = max(1, round(frac * len(examples)))
    held = _held_out(examples, order, n_held)
    while len(held) == len(examples):  # every episode held out: give back the last one drawn
        n_held -= 1
        held = _held_out(examples, order, n_held)
    return ([e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held])
