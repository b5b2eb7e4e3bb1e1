"""Fresh linear probes on a frozen model's hidden states: does the model *represent* each decision?

For every decision of ``trace_train.bootstrap.decisions`` a logistic regression is fitted on the final
hidden states at the decision points of train-split expert episodes and scored on test-split ones. Unlike
the bootstrap's auxiliary head (trained together with the model), these probes see the model only as it
is, so they measure what a model represents whatever produced it. Accuracy and balanced accuracy (the
mean of the two labels' accuracies; chance is 0.5 whatever the label mix) are reported per decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from trace_envs.retail_sim import split_seeds
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import encode, expert_episodes, pad_batch
from trace_train.bootstrap.decisions import DECISIONS
from trace_train.model import ChatRenderer

PROBE_TRAIN_OFFSET = 900_000  # train-split seeds far from the BC stream and the tokenizer corpus


@torch.no_grad()
def decision_features(model: torch.nn.Module, tokenizer: Any, cfg: BootstrapConfig, seeds: Sequence[int],
                      decisions: Sequence[str] = DECISIONS, batch_size: int = 8
                      ) -> dict[str, tuple[torch.Tensor, torch.Tensor, list[str]]]:
    """Per decision: (final hidden states at its points, labels, each point's case group
    (:attr:`~trace_train.bootstrap.decisions.DecisionPoint.group`)) over expert episodes on ``seeds``."""
    renderer = ChatRenderer(tokenizer)
    cfg = replace(cfg, decisions=tuple(decisions), decision_loss_weight=1.0)
    records = expert_episodes(cfg, list(seeds), env_kwargs={}, hints=False)
    examples = [encode(renderer, r, cfg, with_decisions=True) for r in records]
    feats: dict[str, list[torch.Tensor]] = {d: [] for d in decisions}
    labels: dict[str, list[float]] = {d: [] for d in decisions}
    groups: dict[str, list[str]] = {d: [] for d in decisions}
    for start in range(0, len(examples), batch_size):
        chunk = examples[start: start + batch_size]
        ids, attn, _, _ = (torch.from_numpy(a) for a in pad_batch(chunk, tokenizer.pad_token_id))
        hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state.float()
        for row, example in enumerate(chunk):
            for p in example.decisions or []:
                feats[p.decision].append(hidden[row, p.position])
                labels[p.decision].append(float(p.label))
                groups[p.decision].append(p.group)
    return {d: (torch.stack(feats[d]) if feats[d] else torch.zeros(0, model.config.hidden_size),
                torch.tensor(labels[d]), groups[d]) for d in decisions}


def fit_probe(x: torch.Tensor, y: torch.Tensor, steps: int = 300, l2: float = 1e-3, seed: int = 0,
              balanced: bool = True) -> torch.nn.Linear:
    """A logistic regression (standardised inputs folded into the weights), fitted with L-BFGS.

    ``balanced``: each label carries half of the loss whatever its share, the estimator that matches balanced
    accuracy. Unweighted, a rare label (structured's "meets every constraint" is 17 % of its points) is traded
    for the common one at the 0.5 threshold and balanced accuracy understates what the features hold."""
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    positive_share = float(y.mean())
    weights = None
    if balanced and 0 < positive_share < 1:
        weights = torch.where(y > 0, 0.5 / positive_share, 0.5 / (1 - positive_share))
    with torch.random.fork_rng(devices=[]):  # the probe's init depends on ``seed`` only; the caller's RNG is kept
        torch.manual_seed(seed)
        probe = torch.nn.Linear(x.shape[1], 1)
    optimizer = torch.optim.LBFGS(probe.parameters(), max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(probe(z).squeeze(-1), y, weight=weights)
        loss = loss + l2 * probe.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():  # fold the standardisation in: probe(x) = w · (x - mean) / std + b
        weight = probe.weight / std
        probe.bias -= (weight * mean).sum()
        probe.weight.copy_(weight)
    return probe


def score(probe: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        said = (probe(x).squeeze(-1) > 0).float()
    right = said == y
    per_label = [float(right[y == v].float().mean()) for v in (0.0, 1.0) if bool((y == v).any())]
    return {"accuracy": float(right.float().mean()), "balanced_accuracy": sum(per_label) / len(per_label),
            "points": int(len(y)), "positive_share": float(y.mean())}


def linear_probes(model: torch.nn.Module, tokenizer: Any, cfg: BootstrapConfig, train_episodes: int = 1500,
                  test_episodes: int = 200, decisions: Sequence[str] = DECISIONS) -> dict[str, dict[str, Any]]:
    """Held-out accuracy of a fresh linear probe per decision (train-split fit, test-split score): the
    label-balanced probe of :func:`fit_probe`, and the unweighted one's balanced accuracy beside it; and the
    balanced probe's accuracy on each case group (``accuracy_by_case``, ``points_by_case``), since a decision read
    at 0.85 overall can still be read at chance on the cases a capability env trains (the precondition refusals
    that hinge on the request's kind and the order's status, docs/research_log.md, session 28).

    A probe has ``hidden_size`` + 1 weights; 300 train episodes give a rare decision ~300 points, too few to
    pin 129 weights down (on one base the held-out figure moved by 0.05 with the L2 strength), so the default
    fits on 1,500 (~1,600 points for precondition)."""
    was_training = model.training
    model.eval()
    try:
        train = decision_features(model, tokenizer, cfg, split_seeds("train", train_episodes,
                                                                     offset=PROBE_TRAIN_OFFSET), decisions)
        test = decision_features(model, tokenizer, cfg, split_seeds("test", test_episodes), decisions)
    finally:
        model.train(was_training)
    out = {}
    for d in decisions:
        (x, y, _), (xt, yt, groups) = train[d], test[d]
        if len(y) < 2 or len(yt) == 0 or y.min() == y.max():
            out[d] = {"accuracy": float("nan"), "balanced_accuracy": float("nan"), "points": int(len(yt)),
                      "positive_share": float(yt.mean()) if len(yt) else float("nan"),
                      "unweighted_balanced_accuracy": float("nan"), "train_points": int(len(y))}
            continue
        unweighted = score(fit_probe(x, y, balanced=False), xt, yt)["balanced_accuracy"]
        probe = fit_probe(x, y)
        out[d] = {**score(probe, xt, yt), "unweighted_balanced_accuracy": unweighted, "train_points": int(len(y)),
                  **accuracy_by_group(probe, xt, yt, groups)}
    return out


def accuracy_by_group(probe: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor, groups: Sequence[str]
                      ) -> dict[str, dict[str, float | int]]:
    """``accuracy_by_case`` (the probe's accuracy on the points of each group) and ``points_by_case``."""
    with torch.no_grad():
        right = ((probe(x).squeeze(-1) > 0).float() == y).tolist()
    hits: dict[str, list[bool]] = {}
    for group, ok in zip(groups, right):
        hits.setdefault(group, []).append(ok)
    return {"accuracy_by_case": {g: sum(h) / len(h) for g, h in sorted(hits.items())},
            "points_by_case": {g: len(h) for g, h in sorted(hits.items())}}
