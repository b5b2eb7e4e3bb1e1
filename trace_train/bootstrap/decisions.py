"""Act-or-refuse decision points of expert episodes and the auxiliary probe head trained on them.

A pretrained LLM can tell whose order it is looking at even when it acts without checking; the
miniature's base learns its behaviour from an imperfect expert, and a 2-layer model does not pick the
ownership cue out of that noisy signal alone (measured: a linear probe reads "must refuse" at 0.72).
With ``BootstrapConfig.decision_loss_weight`` > 0 a linear head on the final hidden state is trained,
at every decision point, to predict the oracle's decision. The head shapes what the base *represents*;
the LM head still clones the expert's (knob-corrupted) behaviour, and the head is not saved with the
policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import torch

DECISION_TOOL = "get_order_details"  # the lookup after which the expert acts on or refuses an order


@dataclass(frozen=True)
class DecisionPoint:
    """Position whose hidden state predicts the first token of the turn that acts or refuses."""

    position: int
    must_refuse: bool
    case: str  # "allow", or the failed precondition ("ownership", "status")


def decision_points(messages: Sequence[dict[str, Any]], turns: Sequence[tuple[int, int]],
                    task: dict[str, Any]) -> list[DecisionPoint]:
    """The decision points of one encoded episode.

    ``turns`` are the renderer's ``(prompt_len, completion_len)`` of each assistant message in order;
    a decision point is the assistant turn right after the order lookup of a write request, labelled
    with that request's eligibility from the task annotation.
    """
    writes = {i["order_id"]: i for i in task.get("intents", []) if i.get("kind") != "question"}
    assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    points = []
    for (prompt_len, _), index in zip(turns, assistant):
        previous = messages[index - 1]
        if previous.get("role") != "tool" or previous.get("name") != DECISION_TOOL:
            continue
        intent = writes.get(_order_id(previous.get("content", "")))
        if intent is None:
            continue
        eligible = bool(intent.get("eligible", True))
        points.append(DecisionPoint(prompt_len - 1, not eligible,
                                    "allow" if eligible else intent.get("ineligible_reason") or "other"))
    return points


def _order_id(content: str) -> str | None:
    try:
        order = json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return None
    return order.get("order_id") if isinstance(order, dict) else None


def decision_index(points: Sequence[Sequence[DecisionPoint]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, cols, labels)`` tensors of a padded batch's decision points (row = example)."""
    flat = [(row, p.position, float(p.must_refuse)) for row, ps in enumerate(points) for p in ps]
    rows = torch.tensor([f[0] for f in flat], dtype=torch.long)
    cols = torch.tensor([f[1] for f in flat], dtype=torch.long)
    labels = torch.tensor([f[2] for f in flat], dtype=torch.float32)
    return rows, cols, labels


class DecisionHead(torch.nn.Module):
    """A linear probe: final hidden state at a decision point -> logit of "must refuse"."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden[rows, cols]).squeeze(-1)

    def loss(self, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean binary cross-entropy over the batch's decision points (0 when it has none)."""
        if rows.numel() == 0:
            return hidden.sum() * 0.0
        return torch.nn.functional.binary_cross_entropy_with_logits(self.logits(hidden, rows, cols).float(), labels)


@torch.no_grad()
def head_outcomes(head: DecisionHead, hidden: torch.Tensor,
                  points: Sequence[Sequence[DecisionPoint]]) -> list[tuple[str, bool]]:
    """``(case, whether the head said the oracle's decision)`` for each decision point of a batch."""
    rows, cols, labels = decision_index(points)
    if rows.numel() == 0:
        return []
    said = (head.logits(hidden, rows, cols) > 0).float()
    return list(zip((p.case for ps in points for p in ps), (said == labels).tolist()))
