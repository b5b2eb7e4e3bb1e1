"""Token-level gated multi-LoRA layers.

Each adapted linear projection becomes a :class:`GatedLoRALinear`:

    y = W x + sum_{chosen slots i >= 1} g_i * scale_i * B_i A_i x

where slot 0 is the base model (no adapter). Routing is decided once per decoder block by a
:class:`BlockGate` (``nn.Linear(d, N + 1)`` with bias) on the block's *normed* hidden state (the
output of its input layernorm, detached): softmax over slots, token-level top-k, and each chosen
slot is weighted by its own probability (``weighting='probability'``, Switch-style; for top-1 the chosen
probability) or taken whole (``weighting='selection'``: g = 1 on the chosen slots in the forward pass, the
gradient of the probability in the backward pass -- a straight-through estimator). The paper leaves which of the
two its gate uses open; with probability weighting an unsure gate (top-1 p = 0.4) runs the chosen adapter at 40 %
strength. Only the gates hold trainable parameters; the adapters' A/B matrices are non-persistent buffers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)


@dataclass
class GateConfig:
    """How the gates route. ``init='base_bias'`` starts every token on the base slot (paper: 5.0).

    ``scope='token'``: the per-block token-level gates below decide (the paper's cap_gate). ``scope='episode'``:
    one learned router reads the episode's opening request and its top-1 slot plays every token of the episode
    (the paper's ``moe_gate`` ``routing_scope: global``; :mod:`trace_moe.episode_router`); the block gates are then
    not trained and only run when a caller forces a slot."""

    top_k: int = 1
    init: Literal["base_bias", "zero"] = "base_bias"
    base_bias: float = 5.0
    weighting: Literal["probability", "selection"] = "probability"
    scope: Literal["token", "episode"] = "token"

    def __post_init__(self) -> None:
        if self.weighting not in ("probability", "selection"):
            raise ValueError(f"gate weighting must be 'probability' or 'selection', got {self.weighting!r}")
        if self.scope not in ("token", "episode"):
            raise ValueError(f"gate scope must be 'token' or 'episode', got {self.scope!r}")


class RoutingControl:
    """State shared by all gates of one composed model: forced routing and input capture.

    ``forced`` is ``None`` (gates decide), an ``int`` slot for every token, or a LongTensor of
    shape (batch,) / (batch, seq) with one slot per sequence / per token. A forced slot gets g = 1.
    """

    def __init__(self) -> None:
        self.forced: int | torch.Tensor | None = None
        self.capture_inputs = False
        self.disabled_slots: tuple[int, ...] = ()  # slots the gates may not choose (logits -inf)


class BlockGate(nn.Module):
    """The gate of one decoder block; remembers its last logits and routing weights for the loss."""

    def __init__(self, hidden_size: int, num_slots: int, config: GateConfig, control: RoutingControl,
                 layer_index: int = 0) -> None:
        super().__init__()
        if not 1 <= config.top_k <= num_slots:
            raise ValueError(f"top_k={config.top_k} must be in [1, {num_slots}]")
        self.proj = nn.Linear(hidden_size, num_slots, bias=True)
        self.num_slots = num_slots
        self.top_k = config.top_k
        self.weighting = config.weighting
        self.layer_index = layer_index
        self._control = control
        self.reset_parameters(config)
        self.last_logits: torch.Tensor | None = None
        self.last_weights: torch.Tensor | None = None
        self.last_input: torch.Tensor | None = None
        self.forced_slot: int | None = None  # set when a single slot is forced for the whole batch
        self._coef: torch.Tensor | None = None

    def reset_parameters(self, config: GateConfig) -> None:
        with torch.no_grad():
            if self.proj.weight.device.type == "meta":
                return
            self.proj.weight.zero_()
            self.proj.bias.zero_()
            if config.init == "base_bias":
                self.proj.bias[0] = config.base_bias
            elif config.init != "zero":
                raise ValueError(f"unknown gate init {config.init!r}; use 'base_bias' or 'zero'")

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Gate logits (…, N + 1) for a normed hidden state; the input is detached."""
        return self.proj(hidden.detach().to(self.proj.weight.dtype))

    def route(self, hidden: torch.Tensor) -> None:
        """Compute and store this block's routing weights for the current forward pass."""
        control = self._control
        self._coef = None
        if control.capture_inputs:
            self.last_input = hidden.detach()
        logits = self.logits(hidden)
        self.last_logits = logits
        forced = control.forced
        if forced is not None:
            self.forced_slot = forced if isinstance(forced, int) else None
            self.last_weights = forced_weights(forced, logits.shape[:-1], self.num_slots, logits.device)
            return
        self.forced_slot = None
        if control.disabled_slots:
            logits = logits.clone()
            logits[..., list(control.disabled_slots)] = float("-inf")
            self.last_logits = logits
        self.last_weights = topk_weights(logits, self.top_k, straight_through=self.weighting == "selection")

    def expanded_coef(self, scales: torch.Tensor, rank: int, dtype: torch.dtype) -> torch.Tensor:
        """g_i * scale_i repeated over each adapter's rank: (…, N * r); computed once per forward.

        Every projection of a block shares it (an adapter's scale is the same on all its modules).
        """
        if self._coef is None or self._coef.dtype != dtype or self._coef.shape[-1] != scales.numel() * rank:
            coef = self.last_weights[..., 1:].to(scales.dtype) * scales
            self._coef = coef.repeat_interleave(rank, dim=-1).to(dtype)
        return self._coef

    def hook(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        """Forward hook for the block's input layernorm."""
        self.route(output)


def select_slots(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` slots a gate chooses for each token (…, k), first choice first: the ``k`` highest gate logits,
    exact ties going to the lowest slot.

    The one selection rule of the forward pass (:func:`topk_weights`), the routing report, the load-balancing loss
    and the routing trace. A stable descending sort makes it the same on every device (``torch.topk`` breaks exact
    ties at a device-dependent slot; ``init='zero'`` ties every slot, a base-bias init every adapter slot)."""
    return torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]


def topk_weights(logits: torch.Tensor, k: int, straight_through: bool = False) -> torch.Tensor:
    """Switch-style weights: softmax probs kept on the top-k slots (:func:`select_slots`), zero elsewhere (not
    renormalized).

    ``straight_through``: 1 on the top-k slots in value, with the probabilities' gradient."""
    probs = logits.softmax(dim=-1)
    top_i = select_slots(logits, k)
    top_p = probs.gather(-1, top_i)
    if straight_through:
        top_p = top_p - top_p.detach() + 1.0
    return torch.zeros_like(probs).scatter(-1, top_i, top_p)


def forced_weights(forced: int | torch.Tensor, lead_shape: torch.Size, num_slots: int,
                   device: torch.device) -> torch.Tensor:
    """One-hot weights (g = 1) for a forced slot (int, per-sequence (B,) or per-token (B, T))."""
    if isinstance(forced, int):
        if not 0 <= forced < num_slots:
            raise ValueError(f"forced slot {forced} out of range [0, {num_slots})")
        slots = torch.full(lead_shape, forced, dtype=torch.long, device=device)
    else:
        slots = forced.to(device=device, dtype=torch.long)
        if slots.dim() == 1 and len(lead_shape) == 2:
            slots = slots[:, None].expand(lead_shape)
        if tuple(slots.shape) != tuple(lead_shape):
            raise ValueError(f"forced slots of shape {tuple(slots.shape)} do not match tokens {tuple(lead_shape)}")
        if slots.numel() and (slots.min() < 0 or slots.max() >= num_slots):
            raise ValueError(f"forced slots out of range [0, {num_slots})")
    return F.one_hot(slots, num_slots).float()


class GatedLoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus N frozen LoRA updates mixed by its block's gate weights."""

    def __init__(self, base: nn.Linear, lora_a: Sequence[torch.Tensor], lora_b: Sequence[torch.Tensor],
                 scales: Sequence[float], gate: BlockGate) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"GatedLoRALinear wraps nn.Linear, got {type(base).__name__}")
        self.base_layer = base
        self.num_adapters = len(lora_a)
        self.rank = int(lora_a[0].shape[0])
        dev, dtype = base.weight.device, base.weight.dtype
        for a, b in zip(lora_a, lora_b):
            if a.shape != (self.rank, base.in_features) or b.shape != (base.out_features, self.rank):
                raise ValueError(
                    f"LoRA shapes A{tuple(a.shape)} B{tuple(b.shape)} do not fit Linear({base.in_features}, "
                    f"{base.out_features}) with rank {self.rank}"
                )
        self.register_buffer("lora_a", torch.cat(list(lora_a), 0).to(dev, dtype), persistent=False)
        self.register_buffer("lora_b", torch.cat(list(lora_b), 1).to(dev, dtype), persistent=False)
        self.register_buffer("scales", torch.tensor(list(scales), dtype=torch.float32, device=dev),
                             persistent=False)
        self._scale_list = [float(s) for s in scales]
        self._gate = [gate]  # a list, so the gate is not registered twice as a submodule

    @property
    def gate(self) -> BlockGate:
        return self._gate[0]

    def adapter_delta(self, x: torch.Tensor, slot: int) -> torch.Tensor:
        """scale_i * B_i A_i x for adapter slot i >= 1 (same op order as peft's LoRA Linear)."""
        i, r = slot - 1, self.rank
        a = self.lora_a[i * r:(i + 1) * r]
        b = self.lora_b[:, i * r:(i + 1) * r]
        return F.linear(F.linear(x, a), b) * self._scale_list[i]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        gate = self.gate
        weights = gate.last_weights
        if weights is None:
            raise RuntimeError("gate has no routing weights: the block's input layernorm hook did not run")
        if weights.shape[:-1] != x.shape[:-1]:
            raise RuntimeError(f"routing weights {tuple(weights.shape)} do not match input {tuple(x.shape)}")
        out_dtype = result.dtype
        xa = x.to(self.lora_a.dtype)
        if gate.forced_slot is not None:  # exact single-adapter path (tests, oracle router)
            if gate.forced_slot == 0:
                return result
            return (result + self.adapter_delta(xa, gate.forced_slot)).to(out_dtype)
        # all adapters at once: A_cat x (…, N*r), scaled per slot by g_i * scale_i, then B_cat
        h = F.linear(xa, self.lora_a) * gate.expanded_coef(self.scales, self.rank, xa.dtype)
        return (result + F.linear(h, self.lora_b)).to(out_dtype)

    def extra_repr(self) -> str:
        return f"adapters={self.num_adapters}, rank={self.rank}"


@dataclass
class TrainableReport:
    """What :func:`check_only_gates_trainable` found."""

    trainable: int
    frozen: int
    trainable_names: list[str]


def check_only_gates_trainable(model: nn.Module, gate_prefix: str = "gates.") -> TrainableReport:
    """Prove that only gate parameters require grad; raise ``AssertionError`` otherwise.

    Returns the trainable and frozen parameter counts (every parameter of ``model`` is visited).
    """
    trainable, frozen, names, bad = 0, 0, [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            trainable += p.numel()
            names.append(name)
            if not name.startswith(gate_prefix):
                bad.append(name)
        else:
            frozen += p.numel()
    if bad:
        raise AssertionError(f"non-gate parameters are trainable: {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    if not names:
        raise AssertionError("no gate parameter is trainable")
    return TrainableReport(trainable=trainable, frozen=frozen, trainable_names=names)
