"""Teacher-forced probe of a BC model on held-out expert episodes: id-token and overall accuracy.

Cheap (no generation); the real measure is the rollout evaluation, this one tracks learning.
"""

from __future__ import annotations

from typing import Any

import torch

from trace_envs.retail_sim import atomic_vocabulary, split_seeds
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import encode, expert_episodes, pad_batch
from trace_train.model import ChatRenderer


@torch.no_grad()
def teacher_forced_probe(model: torch.nn.Module, tokenizer: Any, renderer: ChatRenderer,
                         cfg: BootstrapConfig, batch_size: int = 8) -> dict[str, float]:
    id_tokens = set(tokenizer.convert_tokens_to_ids(atomic_vocabulary()))
    records = expert_episodes(cfg, split_seeds("test", cfg.probe_episodes))
    examples = [encode(renderer, r, cfg) for r in records]
    hits = total = id_hits = id_total = 0
    for start in range(0, len(examples), batch_size):
        ids, attn, mask = (torch.from_numpy(a) for a in pad_batch(examples[start: start + batch_size],
                                                                   tokenizer.pad_token_id))
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        target = ids[:, 1:]
        select = mask[:, 1:].bool()
        correct = (logits.argmax(-1) == target) & select
        hits += int(correct.sum())
        total += int(select.sum())
        is_id = torch.zeros_like(select)
        for tid in id_tokens:
            is_id |= target == tid
        is_id &= select
        id_hits += int((correct & is_id).sum())
        id_total += int(is_id.sum())
    return {"token_accuracy": hits / max(1, total), "id_token_accuracy": id_hits / max(1, id_total),
            "episodes": len(examples)}
