"""Episode-level learned routing: one router reads the episode's opening request, its top-1 slot plays the episode.

The paper's ``moe_gate`` package offers this beside the per-block token gates (``routing_scope: global``: a
``Linear(d -> N)`` on the frozen base's hidden state of the prompt, its argmax broadcast to every block). Here the
router's input is the frozen base's final hidden states over the episode's first user message, rendered alone as a
user turn (so a capability env's hint in the system prompt cannot leak into the route), mean-pooled (or the last
token's); the features are standardised with the training set's mean and spread and a multinomial logistic
regression with an L2 penalty (full-batch L-BFGS from zeros: deterministic) picks the slot. Base and adapters stay
frozen; only the router trains. A slot with no training example is never chosen (its logit is ``-inf``).

The caller renders the request to token ids (``ChatRenderer.request_ids`` in ``trace_train``) so that training and
inference encode it alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from trace_moe.composed import COMPOSE_JSON, ComposedModel
from trace_moe.routers import RouteDecision

ROUTER_FILE = "episode_router.safetensors"
ROUTER_JSON = "episode_router.json"


@dataclass
class EpisodeRouterConfig:
    """``moe.episode_router``: how the episode router (``moe.gate.scope: episode``) reads and fits."""

    pool: Literal["mean", "last"] = "mean"  # the request's final hidden states: their mean | the last token's
    weight_decay: float = 0.01  # L2 penalty on the weights (features are standardised)
    max_iter: int = 300  # L-BFGS iterations
    examples_per_capability: int = 256  # successful capability-env episodes per adapter (one short forward each)

    def __post_init__(self) -> None:
        if self.pool not in ("mean", "last"):
            raise ValueError(f"episode router pool must be 'mean' or 'last', got {self.pool!r}")
        if self.weight_decay < 0 or self.max_iter < 1 or self.examples_per_capability < 1:
            raise ValueError(f"weight_decay must be >= 0, max_iter and examples_per_capability >= 1, got "
                             f"{self.weight_decay}, {self.max_iter}, {self.examples_per_capability}")


def composition_scope(composed_dir: str | Path) -> str:
    """``token`` or ``episode``: how a saved composition routes (``gate_config.scope`` in its ``compose.json``)."""
    path = Path(composed_dir) / COMPOSE_JSON
    if not path.exists():
        raise ValueError(f"{composed_dir}: no {COMPOSE_JSON}; not a directory written by trace-rl compose")
    return str(json.loads(path.read_text()).get("gate_config", {}).get("scope", "token"))


@torch.no_grad()
def request_features(composed: ComposedModel, requests: Sequence[Sequence[int]], pool: str = "mean",
                     batch_size: int = 32) -> torch.Tensor:
    """(n, d) features of tokenized requests: the base's (slot 0) final hidden states, pooled over each request's
    own tokens (right-padded batches; causal attention keeps a request's states free of the padding)."""
    if not requests or any(len(r) == 0 for r in requests):
        raise ValueError("every request needs at least one token")
    device = next(composed.model.parameters()).device
    rows = []
    with composed.forcing(0):
        for start in range(0, len(requests), batch_size):
            chunk = [list(r) for r in requests[start:start + batch_size]]
            width = max(len(r) for r in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, r in enumerate(chunk):
                ids[i, :len(r)] = torch.tensor(r)
                mask[i, :len(r)] = 1
            out = composed.model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True,
                                 use_cache=False)
            hidden, m = out.hidden_states[-1].float().cpu(), mask.float()
            if pool == "mean":
                rows.append((hidden * m[..., None]).sum(1) / m.sum(1, keepdim=True))
            else:
                rows.append(hidden[torch.arange(len(chunk)), mask.sum(1) - 1])
    return torch.cat(rows)


@dataclass
class EpisodeRouter:
    """A fitted router: standardisation, weights (S, d) and bias (S,) over the composition's slots."""

    slot_names: list[str]
    pool: str
    mean: torch.Tensor
    std: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """(n, S) slot logits (``-inf`` where the bias is, i.e. slots without training examples)."""
        return ((features - self.mean) / self.std) @ self.weight.T + self.bias

    def decide(self, features: torch.Tensor) -> list[RouteDecision]:
        decisions = []
        for row in self.logits(features):
            slot = int(row.argmax())
            decisions.append(RouteDecision(slot=slot, label=self.slot_names[slot],
                                           scores={n: float(v) for n, v in zip(self.slot_names, row.tolist())}))
        return decisions

    def save(self, out_dir: str | Path) -> None:
        from safetensors.torch import save_file

        from trace_envs.records import write_json_atomic

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {"mean": self.mean, "std": self.std, "weight": self.weight, "bias": self.bias}
        tmp = out / (ROUTER_FILE + ".tmp")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
        tmp.replace(out / ROUTER_FILE)
        write_json_atomic(out / ROUTER_JSON, {"slot_names": self.slot_names, "pool": self.pool})

    @classmethod
    def load(cls, in_dir: str | Path) -> EpisodeRouter:
        from safetensors.torch import load_file

        in_dir = Path(in_dir)
        if not (in_dir / ROUTER_JSON).exists():
            raise ValueError(f"{in_dir}: no {ROUTER_JSON}; the composition was not trained with moe.gate.scope=episode")
        meta = json.loads((in_dir / ROUTER_JSON).read_text())
        t = load_file(str(in_dir / ROUTER_FILE))
        return cls(list(meta["slot_names"]), meta["pool"], t["mean"], t["std"], t["weight"], t["bias"])


def fit_episode_router(features: torch.Tensor, targets: Sequence[int] | torch.Tensor, slot_names: Sequence[str],
                       cfg: EpisodeRouterConfig) -> EpisodeRouter:
    """Multinomial logistic regression on standardised ``features`` towards ``targets``: slot indices (cross
    entropy), or an (n, S) matrix of each example's distribution over the slots (the paper's gate warm start: the
    KL to each task's distribution of rewards over the slots). A slot with no mass in any target is never chosen."""
    soft = isinstance(targets, torch.Tensor) and targets.dim() == 2
    if soft:
        p = targets.double()
        if p.shape != (len(features), len(slot_names)) or (p < 0).any() or not torch.allclose(p.sum(1), torch.ones(
                len(p), dtype=torch.float64), atol=1e-6):
            raise ValueError(f"soft targets must be a ({len(features)}, {len(slot_names)}) matrix of distributions")
        present = p.sum(0) > 0
    else:
        y = torch.tensor(list(targets), dtype=torch.long)
        if len(y) != len(features) or len(y) == 0:
            raise ValueError(f"{len(features)} feature rows for {len(y)} labels")
        if int(y.min()) < 0 or int(y.max()) >= len(slot_names):
            raise ValueError(f"labels must be slot indices in [0, {len(slot_names)})")
        p = F.one_hot(y, len(slot_names)).double()
        present = torch.bincount(y, minlength=len(slot_names)) > 0
    if len(p) == 0:
        raise ValueError("no examples to fit the episode router on")
    x = features.double()
    mean, std = x.mean(0), x.std(0, unbiased=False).clamp_min(1e-6)
    z = (x - mean) / std
    weight = torch.zeros(len(slot_names), x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(len(slot_names), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], max_iter=cfg.max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        # absent slots are left out of the softmax (not masked with -inf, whose 0 * -inf would poison soft targets)
        log_q = F.log_softmax((z @ weight.T + bias)[:, present], dim=-1)
        loss = -(p[:, present] * log_q).sum(1).mean() + cfg.weight_decay * weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        final_bias = torch.where(present, bias, torch.full_like(bias, -math.inf))
    return EpisodeRouter(list(slot_names), cfg.pool, mean.float(), std.float(), weight.detach().float(),
                         final_bias.float())


def train_episode_router(composed: ComposedModel, requests: Sequence[Sequence[int]],
                         targets: Sequence[int] | torch.Tensor, cfg: EpisodeRouterConfig) -> EpisodeRouter:
    """Features of the tokenized ``requests`` under the frozen base, then the fit (``fit_episode_router``: slot
    labels or per-request distributions over the slots)."""
    return fit_episode_router(request_features(composed, requests, cfg.pool), targets, composed.slot_names, cfg)


class BoundEpisodeRouter:
    """An :class:`EpisodeRouter` with the composed model and request encoder it reads with: ``route(text)``."""

    def __init__(self, router: EpisodeRouter, composed: ComposedModel, encode: Callable[[str], list[int]]) -> None:
        if router.slot_names != composed.slot_names:
            raise ValueError(f"router slots {router.slot_names} do not match the composition's {composed.slot_names}")
        self.router = router
        self.model = composed
        self.encode = encode

    @property
    def names(self) -> list[str]:
        return list(self.router.slot_names)

    def route(self, text: str) -> RouteDecision:
        features = request_features(self.model, [self.encode(text)], self.router.pool)
        return self.router.decide(features)[0]


@dataclass
class EpisodeRoutingSummary:
    """Held-out routing of the episode router: accuracy against each example's slot, the share of episodes per
    slot, and the confusion counts (rows: label, columns: chosen)."""

    slot_names: list[str]
    episodes: int
    episode_accuracy: float
    load: list[float]
    confusion: list[list[int]]

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_routing(router: EpisodeRouter, features: torch.Tensor, labels: Sequence[int]) -> EpisodeRoutingSummary:
    n = len(router.slot_names)
    chosen = [d.slot for d in router.decide(features)]
    confusion = [[0] * n for _ in range(n)]
    for y, c in zip(labels, chosen):
        confusion[y][c] += 1
    total = max(len(chosen), 1)
    return EpisodeRoutingSummary(
        slot_names=list(router.slot_names), episodes=len(chosen),
        episode_accuracy=sum(int(y == c) for y, c in zip(labels, chosen)) / total,
        load=[sum(int(c == s) for c in chosen) / total for s in range(n)], confusion=confusion)
