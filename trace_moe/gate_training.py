"""Training the gates of a :class:`~trace_moe.composed.ComposedModel` (base and adapters frozen).

Loss = LM cross-entropy on masked (assistant) tokens
     + lambda_LB    * Switch load-balancing loss  N_slots * sum_i f_i P_i   (mean over blocks)
     + lambda_label * cross-entropy of gate logits vs the example's slot label (mean over blocks)

Two modes: ``end_to_end`` runs the routed model and back-propagates all three terms into the gates;
``captured`` (after the paper's memory-efficient path) runs the model under no_grad at the start of each epoch,
routed by the current gates, captures every block's gate input, and trains the gates on those inputs with the
label and load-balancing terms only (the LM term is then not available).

The paper captures once, with routing forced to the example's label. From block 1 on, such an input already
carries that label's adapter, so the gates learn to read the label back (on pairs of identical sequences with
different labels, block 1 separated them) and their training accuracy says nothing of inference, where no label
is forced. Inputs routed by the gates themselves carry no label and are what inference feeds each block, for the
gates as they were when the epoch began (the approximation: within an epoch, block l does not see how the
updates of the earlier blocks change its input).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from trace_moe.composed import ComposedModel
from trace_moe.examples import GateExample, collate, iter_batches
from trace_moe.gated_lora import select_slots
from trace_moe.token_labels import LABEL_KINDS

logger = logging.getLogger(__name__)

GATE_TRAIN_METHODS = ("supervised", "routing_targets", "grpo_target", "grpo_mixture")


@dataclass
class GateTrainConfig:
    """Gate optimisation settings. :meth:`paper` gives the paper's preset."""

    lr: float = 5e-4
    epochs: int = 3
    weight_decay: float = 0.01
    warmup_frac: float = 0.05
    lb_coef: float = 0.001
    label_coef: float = 0.5
    batch_size: int = 1
    grad_accum: int = 8
    max_grad_norm: float = 1.0
    max_len: int = 8192
    pad_id: int = 0
    mode: Literal["end_to_end", "captured"] = "end_to_end"
    seed: int = 0
    train_slots: list[int] | None = None  # only these gate rows train (e.g. a newly added slot); None = all
    # supervised (this module, on the capability envs' successes) | routing_targets (this module, on the target's
    # successes labelled with each task's best slot, trace_moe.routing_targets; settings in moe.routing) |
    # grpo_target | grpo_mixture: gate-only GRPO on the target env / on the mixture of the capability envs
    # (trace_train.grpo.gate_grpo, settings in moe.grpo)
    method: Literal["supervised", "routing_targets", "grpo_target", "grpo_mixture"] = "supervised"
    # which positions the label loss trains, and towards which slot (trace_moe.token_labels): assistant = the
    # example's slot on its assistant tokens | all_tokens = on every token (system, user and tool turns too: the
    # gates also route those at inference, and an adapter acts through them) | likelihood = the example's slot only
    # where its adapter makes the next policy token >= likelihood_margin nats likelier than the base, else the base
    labels: Literal["assistant", "all_tokens", "likelihood"] = "assistant"
    likelihood_margin: float = 1.0

    def __post_init__(self) -> None:
        for key in ("epochs", "batch_size", "grad_accum", "max_len"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"gate training: {key} must be >= 1, got {getattr(self, key)}")
        if self.lr <= 0:
            raise ValueError(f"gate training: lr must be > 0, got {self.lr}")
        if self.method not in GATE_TRAIN_METHODS:
            raise ValueError(f"gate training: method must be one of {GATE_TRAIN_METHODS}, got {self.method!r}")
        if self.labels not in LABEL_KINDS:
            raise ValueError(f"gate training: labels must be one of {LABEL_KINDS}, got {self.labels!r}")
        if self.likelihood_margin < 0:
            raise ValueError(f"gate training: likelihood_margin must be >= 0 nats, got {self.likelihood_margin}")
        if self.train_slots is not None and not self.train_slots:
            raise ValueError("gate training: train_slots must name at least one slot (or be null for all)")

    @classmethod
    def paper(cls) -> GateTrainConfig:
        """AdamW lr 5e-4, wd 0.01, 5 % warmup + linear decay, 3 epochs, lambda_LB 0.001, micro-batch 1,
        grad-accum 8, clip 1.0; label coefficient 0.5 (the repo's recommended value).

        On small gate data sets (~100 examples) these never move tokens off a 5.0 base bias; the CLI's
        defaults (conf/moe/default.yaml) are the pipeline's: lr 5e-3, 10 epochs, base bias 1.0."""
        return cls(lr=5e-4, epochs=3)


@dataclass
class GateTrainMetrics:
    """Per-epoch mean losses and totals of a gate training run."""

    epochs: list[dict[str, float]] = field(default_factory=list)
    optimizer_steps: int = 0
    trainable_params: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def load_balancing_loss(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Switch LB loss N * sum_i f_i P_i over the masked tokens of one block's gate logits (…, N)."""
    sel = logits[mask.bool()]
    if sel.numel() == 0:
        return logits.sum() * 0.0
    probs = sel.float().softmax(-1)
    n = probs.shape[-1]
    f = F.one_hot(select_slots(sel, 1)[..., 0], n).float().mean(0)  # the top-1 slots the forward pass ran
    return n * (f * probs.mean(0)).sum()


def label_loss(logits: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token CE of gate logits (B, T, N) vs each sequence's slot label, over masked tokens."""
    return position_label_loss(logits, torch.where(mask.bool(), labels[:, None].expand(mask.shape), -1))


def position_label_loss(logits: torch.Tensor, position_labels: torch.Tensor) -> torch.Tensor:
    """Per-token CE of gate logits (B, T, N) vs a slot per position (B, T); positions labelled -1 do not count."""
    m = position_labels >= 0
    if not m.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[m].float(), position_labels[m])


def lm_loss(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Next-token CE on positions whose *target* token has loss_mask = 1."""
    target_mask = loss_mask[:, 1:]
    if target_mask.sum() == 0:
        return logits.sum() * 0.0
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten(), reduction="none")
    return (ce * target_mask.flatten()).sum() / target_mask.sum()


def _gate_mask(batch_loss_mask: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Tokens whose routing counts: assistant tokens; all real tokens if a row has none."""
    mask = batch_loss_mask.clone()
    empty = mask.sum(1) == 0
    mask[empty] = attention_mask[empty].float()
    return mask


def _optimizer(composed: ComposedModel, cfg: GateTrainConfig, total_steps: int):
    opt = torch.optim.AdamW(composed.gate_parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = max(1, math.ceil(cfg.warmup_frac * total_steps)) if cfg.warmup_frac > 0 else 0

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def train_gates(composed: ComposedModel, examples: Sequence[GateExample],
                cfg: GateTrainConfig | None = None) -> GateTrainMetrics:
    """Train only the gates of ``composed`` on ``examples``; returns per-epoch metrics."""
    cfg = cfg or GateTrainConfig()
    if not examples:
        raise ValueError("no gate training examples")
    bad = [e.label for e in examples if e.label >= composed.num_slots]
    if bad:
        raise ValueError(f"labels {sorted(set(bad))} out of range for {composed.num_slots} slots")
    report = composed.check_trainable()
    composed.model.eval()
    start = time.perf_counter()
    if cfg.mode not in ("captured", "end_to_end"):
        raise ValueError(f"unknown gate training mode {cfg.mode!r}")
    freeze = _RowFreeze(composed, cfg.train_slots)
    try:
        if cfg.mode == "captured":
            metrics = _train_captured(composed, examples, cfg)
        else:
            metrics = _train_end_to_end(composed, examples, cfg)
    finally:
        freeze.close()
    metrics.trainable_params = report.trainable
    metrics.seconds = time.perf_counter() - start
    return metrics


def _train_end_to_end(
    composed: ComposedModel, examples: Sequence[GateExample], cfg: GateTrainConfig
) -> GateTrainMetrics:
    rng = np.random.default_rng(cfg.seed)
    micro_per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total_steps = max(1, math.ceil(micro_per_epoch / cfg.grad_accum) * cfg.epochs)
    opt, sched = _optimizer(composed, cfg, total_steps)
    device = next(composed.gates.parameters()).device
    metrics = GateTrainMetrics()
    for epoch in range(cfg.epochs):
        sums = {"lm": 0.0, "lb": 0.0, "label": 0.0, "total": 0.0}
        count = 0
        opt.zero_grad(set_to_none=True)
        batches = list(iter_batches(examples, cfg.batch_size, rng.permutation(len(examples))))
        for i, chunk in enumerate(batches):
            b = collate(chunk, cfg.pad_id, cfg.max_len)
            ids, att = b.input_ids.to(device), b.attention_mask.to(device)
            lmask, positions = b.loss_mask.to(device), b.position_labels.to(device)
            out = composed(input_ids=ids, attention_mask=att, use_cache=False)
            gmask = _gate_mask(lmask, att)
            layer_logits = composed.layer_logits()
            l_lm = lm_loss(out.logits, ids, lmask)
            l_lb = torch.stack([load_balancing_loss(lg, gmask) for lg in layer_logits]).mean()
            l_lab = torch.stack([position_label_loss(lg, positions) for lg in layer_logits]).mean()
            loss = l_lm + cfg.lb_coef * l_lb + cfg.label_coef * l_lab
            # the mean over this optimizer step's micro-batches: an epoch's last window may hold fewer
            window = min(cfg.grad_accum, len(batches) - i // cfg.grad_accum * cfg.grad_accum)
            (loss / window).backward()
            for k, v in (("lm", l_lm), ("lb", l_lb), ("label", l_lab), ("total", loss)):
                sums[k] += float(v.detach())
            count += 1
            if (i + 1) % cfg.grad_accum == 0 or i + 1 == len(batches):
                _step(composed, opt, sched, cfg)
                metrics.optimizer_steps += 1
        epoch_metrics = {k: v / max(1, count) for k, v in sums.items()} | {"epoch": epoch}
        metrics.epochs.append(epoch_metrics)
        logger.info("gate epoch %d: %s", epoch, {k: round(v, 4) for k, v in epoch_metrics.items()})
    return metrics


class _RowFreeze:
    """Keep the gate rows outside ``train_slots`` fixed: their gradients are zeroed (so they do not count
    in the clip norm) and their values restored after every optimizer step (AdamW's decoupled weight
    decay would otherwise shrink them)."""

    def __init__(self, composed: ComposedModel, train_slots: Sequence[int] | None) -> None:
        self.composed = composed
        self.frozen: list[int] = []
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.hooks: list = []
        if train_slots is None:
            return
        bad = [s for s in train_slots if not 0 <= int(s) < composed.num_slots]
        if bad:
            raise ValueError(f"train_slots {bad} out of range for {composed.num_slots} slots")
        keep = torch.zeros(composed.num_slots, dtype=torch.bool)
        keep[[int(s) for s in train_slots]] = True
        self.frozen = [i for i in range(composed.num_slots) if not keep[i]]
        for gate in composed.gates:
            self.saved.append((gate.proj.weight.detach().clone(), gate.proj.bias.detach().clone()))
            for p in (gate.proj.weight, gate.proj.bias):
                mask = keep.to(p.device, p.dtype).view(-1, *([1] * (p.dim() - 1)))
                self.hooks.append(p.register_hook(lambda g, m=mask: g * m))
        composed._row_freeze = self  # noqa: SLF001 - read by _step

    def restore(self) -> None:
        if not self.frozen:
            return
        with torch.no_grad():
            for gate, (w, b) in zip(self.composed.gates, self.saved):
                gate.proj.weight[self.frozen] = w[self.frozen]
                gate.proj.bias[self.frozen] = b[self.frozen]

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        self.composed.__dict__.pop("_row_freeze", None)


def _step(composed: ComposedModel, opt, sched, cfg: GateTrainConfig) -> None:
    if cfg.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(composed.gate_parameters(), cfg.max_grad_norm)
    opt.step()
    freeze = composed.__dict__.get("_row_freeze")
    if freeze is not None:
        freeze.restore()
    sched.step()
    opt.zero_grad(set_to_none=True)


@torch.no_grad()
def capture_gate_inputs(composed: ComposedModel, examples: Sequence[GateExample], cfg: GateTrainConfig
                        ) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per block, the gate inputs (M, d) of every labelled position (``GateExample.position_labels``) and their
    labels, routed by the current gates as at inference: the inputs carry no label (see the module docstring)."""
    device = next(composed.gates.parameters()).device
    per_layer: list[list[torch.Tensor]] = [[] for _ in range(composed.num_layers)]
    labels: list[torch.Tensor] = []
    order = range(len(examples))
    for chunk in iter_batches(examples, cfg.batch_size, order):
        b = collate(chunk, cfg.pad_id, cfg.max_len)
        ids, att = b.input_ids.to(device), b.attention_mask.to(device)
        positions = b.position_labels.to(device)
        gmask = positions >= 0
        with composed.forcing(None), composed.capturing():
            composed(input_ids=ids, attention_mask=att, use_cache=False)
            for layer, gate in enumerate(composed.gates):
                per_layer[layer].append(gate.last_input[gmask].float())
                gate.last_input = None
        labels.append(positions[gmask])
    return [torch.cat(x) for x in per_layer], torch.cat(labels)


def _train_captured(composed: ComposedModel, examples: Sequence[GateExample], cfg: GateTrainConfig) -> GateTrainMetrics:
    inputs, labels = capture_gate_inputs(composed, examples, cfg)
    n_tok = labels.shape[0]  # the same positions every epoch; only the inputs change with the gates
    tokens_per_step = max(1, cfg.batch_size * cfg.grad_accum * max(1, n_tok // max(1, len(examples))))
    steps_per_epoch = max(1, math.ceil(n_tok / tokens_per_step))
    opt, sched = _optimizer(composed, cfg, steps_per_epoch * cfg.epochs)
    gen = torch.Generator().manual_seed(cfg.seed)
    metrics = GateTrainMetrics()
    for epoch in range(cfg.epochs):
        if epoch:
            inputs, _ = capture_gate_inputs(composed, examples, cfg)
        perm = torch.randperm(n_tok, generator=gen).to(labels.device)
        sums = {"lb": 0.0, "label": 0.0, "total": 0.0}
        for s in range(steps_per_epoch):
            idx = perm[s * tokens_per_step:(s + 1) * tokens_per_step]
            if idx.numel() == 0:
                continue
            l_lb, l_lab = [], []
            for layer, gate in enumerate(composed.gates):
                logits = gate.logits(inputs[layer][idx])
                ones = torch.ones(idx.shape[0], device=logits.device)
                l_lb.append(load_balancing_loss(logits, ones))
                l_lab.append(F.cross_entropy(logits.float(), labels[idx]))
            lb, lab = torch.stack(l_lb).mean(), torch.stack(l_lab).mean()
            loss = cfg.lb_coef * lb + cfg.label_coef * lab
            loss.backward()
            _step(composed, opt, sched, cfg)
            metrics.optimizer_steps += 1
            for k, v in (("lb", lb), ("label", lab), ("total", loss)):
                sums[k] += float(v.detach())
        epoch_metrics = {k: v / steps_per_epoch for k, v in sums.items()} | {"epoch": epoch}
        metrics.epochs.append(epoch_metrics)
        logger.info("gate epoch %d (captured): %s", epoch, {k: round(v, 4) for k, v in epoch_metrics.items()})
    return metrics
