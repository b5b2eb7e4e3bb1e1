"""How the trained gates route held-out examples: accuracy vs label, load per slot, entropy, collapse."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from trace_moe.composed import ComposedModel
from trace_moe.examples import GateExample, collate, iter_batches
from trace_moe.gated_lora import select_slots

logger = logging.getLogger(__name__)


@dataclass
class RoutingReport:
    """Routing statistics over the labelled tokens of held-out examples (the assistant tokens, or the positions an
    example's ``token_labels`` label), all blocks pooled.

    ``token_accuracy``: fraction of (token, block) decisions whose top-1 slot equals the label.
    ``episode_accuracy``: fraction of episodes whose majority top-1 slot equals the label.
    ``load``: fraction of decisions per slot; ``entropy``: mean routing entropy (nats).
    """

    slot_names: list[str]
    num_tokens: int
    token_accuracy: float
    episode_accuracy: float
    load: list[float]
    load_per_layer: list[list[float]]
    entropy: float
    collapsed: bool
    slot_accuracy: list[float | None] | None = None  # token accuracy among tokens labelled with each slot
    slot_tokens: list[int] | None = None  # (token, block) decisions labelled with each slot

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def routing_report(composed: ComposedModel, examples: Sequence[GateExample], batch_size: int = 8,
                   pad_id: int = 0, collapse_threshold: float = 0.9, max_len: int | None = None) -> RoutingReport:
    """Run the gates (no forcing) on ``examples`` and summarise their top-1 routing."""
    if not examples:
        raise ValueError("no examples to report on")
    device = next(composed.gates.parameters()).device
    n_slots, n_layers = composed.num_slots, composed.num_layers
    layer_counts = torch.zeros(n_layers, n_slots)
    correct = total = 0
    slot_correct = torch.zeros(n_slots)
    slot_total = torch.zeros(n_slots)
    entropy_sum = 0.0
    episode_votes: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros(n_slots))
    episode_label: dict[str, int] = {}
    for start, chunk in enumerate(iter_batches(examples, batch_size, range(len(examples)))):
        b = collate(chunk, pad_id, max_len)
        ids, att = b.input_ids.to(device), b.attention_mask.to(device)
        positions = b.position_labels.to(device)
        mask = positions >= 0
        with composed.forcing(None):
            composed(input_ids=ids, attention_mask=att, use_cache=False)
        for layer, logits in enumerate(composed.layer_logits()):
            probs = logits.float().softmax(-1)
            top = select_slots(logits, 1)[..., 0]  # the slot the forward pass ran (ties: the lowest)
            sel_top = top[mask].cpu()
            layer_counts[layer] += torch.bincount(sel_top, minlength=n_slots).float()
            lab = positions[mask].cpu()
            correct += int((sel_top == lab).sum())
            lab_in = lab.clamp(0, n_slots - 1)
            slot_total += torch.bincount(lab_in, minlength=n_slots).float()
            slot_correct += torch.bincount(lab_in[sel_top == lab], minlength=n_slots).float()
            total += int(sel_top.numel())
            p = probs[mask]
            entropy_sum += float(-(p * p.clamp_min(1e-12).log()).sum())
            for row, ex in enumerate(chunk):
                key = ex.episode_id or f"#{start * batch_size + row}"
                episode_votes[key] += torch.bincount(top[row][mask[row]].cpu(), minlength=n_slots).float()
                episode_label[key] = ex.label
    if total == 0:
        raise ValueError("examples contain no tokens")
    load = (layer_counts.sum(0) / layer_counts.sum()).tolist()
    per_layer = (layer_counts / layer_counts.sum(1, keepdim=True).clamp_min(1)).tolist()
    ep_correct = sum(int(int(v.argmax()) == episode_label[k]) for k, v in episode_votes.items())
    collapsed = max(load) > collapse_threshold
    if collapsed:
        slot = int(torch.tensor(load).argmax())
        logger.warning("routing collapse: slot %d (%s) takes %.1f%% of tokens (> %.0f%%)",
                       slot, composed.slot_names[slot], 100 * load[slot], 100 * collapse_threshold)
    return RoutingReport(
        slot_names=composed.slot_names,
        num_tokens=total // n_layers,
        token_accuracy=correct / total,
        episode_accuracy=ep_correct / len(episode_votes),
        load=load,
        load_per_layer=per_layer,
        entropy=entropy_sum / total,
        collapsed=collapsed,
        slot_accuracy=[float(c / t) if t else None for c, t in zip(slot_correct.tolist(), slot_total.tolist())],
        slot_tokens=[int(t) for t in slot_total.tolist()],
    )
