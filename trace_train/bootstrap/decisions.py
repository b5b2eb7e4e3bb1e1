"""Decision points of expert episodes and the auxiliary probe head trained on them.

A pretrained LLM can tell whose order it is looking at even when it acts without checking; the
miniature's base learns its behaviour from an imperfect expert, and a 2-layer model does not pick the
ownership cue out of that noisy signal alone (measured: a linear probe reads "must refuse" at 0.72).
With ``BootstrapConfig.decision_loss_weight`` > 0 a linear head on the final hidden state is trained,
at every decision point, to predict the oracle's decision. The head shapes what the base *represents*;
the LM head still clones the expert's (knob-corrupted) behaviour, and the head is not saved with the
policy.

One decision per capability (``BootstrapConfig.decisions``, named by the expert's knobs), each read at
the position whose hidden state must carry it, and each a column of the head:

* ``precondition`` — before the turn right after the order lookup of a write request: must the agent
  refuse? (cases ``allow``, ``ownership``, ``status``);
* ``multi_step`` — before each turn that continues with the next request's lookup or that reports
  back: are requests left? (``requests_left``, ``none_left``);
* ``structured`` — at the end of every variant in a product listing (the token before the next
  variant's id, or before the next turn): does this candidate meet every constraint? (``target``;
  ``distractor``, the variant of the right colour over the price bound, listed first; ``other``);
* ``precision`` — before the turn right after the order lookup of an allowed cancel / return /
  address change: did the user state a value other than the default the sloppy expert uses?
  (``exact_value``, ``default_value``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

DECISION_TOOL = "get_order_details"  # the lookup after which the expert acts on or refuses an order
PRODUCT_TOOL = "get_product_details"
PROFILE_TOOL = "get_user_details"
DECISIONS = ("precondition", "multi_step", "structured", "precision")
_PRECISION_KINDS = ("cancel", "return", "modify_address")


@dataclass(frozen=True)
class DecisionPoint:
    """Position whose hidden state should carry one decision, and the decision's true value."""

    position: int
    label: bool  # precondition: must refuse; multi_step: requests left; structured: meets every
    # constraint; precision: the user stated a non-default value
    case: str
    decision: str = "precondition"
    # what the case does not say and a probe's errors may hinge on: precondition, the request's kind, the looked-up
    # order's status ("cancel/delivered": a cancel is refused on any status but pending) and where the order stands in
    # the user's profile as the agent last fetched it (``listed``, ``unlisted`` among the user's other orders,
    # ``no-orders``: the profile lists none, ``unseen``: not fetched); precision, the kind
    detail: str = ""

    @property
    def group(self) -> str:
        """The case, refined by the detail when there is one (``status/cancel/delivered``): the key of per-case
        accuracies."""
        return f"{self.case}/{self.detail}" if self.detail else self.case


@dataclass(frozen=True)
class _Turn:
    index: int  # message index of the assistant turn
    start: int  # position just before the turn's first token
    end: int  # position just after its last token
    previous: dict[str, Any]  # the message before it
    message: dict[str, Any]


def _turns(messages: Sequence[dict[str, Any]], turns: Sequence[tuple[int, int]]) -> list[_Turn]:
    assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return [_Turn(i, prompt_len - 1, prompt_len + n, messages[i - 1], messages[i])
            for (prompt_len, n), i in zip(turns, assistant)]


def _calls(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {}
        out.append((str(fn.get("name", "")), args if isinstance(args, dict) else {}))
    return out


def _looked_up_intent(turn: _Turn, intents: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    previous = turn.previous
    if previous.get("role") != "tool" or previous.get("name") != DECISION_TOOL:
        return None
    return intents.get(_order_id(previous.get("content", "")))


def _precondition(turns: list[_Turn], task: dict[str, Any], messages: Sequence[dict[str, Any]] = (),
                  **_: Any) -> list[DecisionPoint]:
    writes = {i["order_id"]: i for i in task.get("intents", []) if i.get("kind") != "question"}
    points = []
    for turn in turns:
        intent = _looked_up_intent(turn, writes)
        if intent is None:
            continue
        eligible = bool(intent.get("eligible", True))
        order = _json(turn.previous.get("content", ""))
        status = order.get("status", "") if isinstance(order, dict) else ""
        listing = _listing(messages[:turn.index], intent["order_id"])
        points.append(DecisionPoint(turn.start, not eligible,
                                    "allow" if eligible else intent.get("ineligible_reason") or "other",
                                    detail=f"{intent.get('kind', '')}/{status}/{listing}"))
    return points


def _listing(before: Sequence[dict[str, Any]], order_id: str) -> str:
    """Where ``order_id`` stands in the last user profile fetched in ``before`` (see ``DecisionPoint.detail``)."""
    profile = next((_json(m.get("content", "")) for m in reversed(before)
                    if m.get("role") == "tool" and m.get("name") == PROFILE_TOOL), None)
    if not isinstance(profile, dict):
        return "unseen"
    orders = profile.get("orders") or []
    return "listed" if order_id in orders else "unlisted" if orders else "no-orders"


def _multi_step(turns: list[_Turn], task: dict[str, Any], **_: Any) -> list[DecisionPoint]:
    n_requests = len(task.get("intents", []))
    points, lookups = [], 0
    for turn in turns:
        names = [name for name, _ in _calls(turn.message)]
        text = (turn.message.get("content") or "").strip()
        continues = DECISION_TOOL in names and lookups >= 1
        reports = not names and lookups >= 1 and text and not text.startswith("Please confirm")
        if continues or reports:
            left = lookups < n_requests
            points.append(DecisionPoint(turn.start, left, "requests_left" if left else "none_left", "multi_step"))
        if reports:
            break  # the first report back ends the requests; later turns only close the conversation
        lookups += names.count(DECISION_TOOL)
    return points


def _structured(turns: list[_Turn], task: dict[str, Any], ids: Sequence[int] = (),
                token_id: Callable[[str], int | None] | None = None, **_: Any) -> list[DecisionPoint]:
    if token_id is None:
        return []
    swaps = {i.get("product_id"): i for i in task.get("intents", [])
             if i.get("kind") in ("exchange", "modify_items") and i.get("eligible", True)}
    points: list[DecisionPoint] = []
    for k, turn in enumerate(turns):
        region = (turns[k - 1].end if k else 0, turn.start + 1)  # the observation before this turn
        if turn.previous.get("role") != "tool" or turn.previous.get("name") != PRODUCT_TOOL:
            continue
        listing = _json(turn.previous.get("content", ""))
        intent = swaps.get(listing.get("product_id")) if isinstance(listing, dict) else None
        if intent is None or not isinstance(listing.get("variants"), dict):
            continue
        order = list(listing["variants"])
        found = [(v, _find(ids, token_id(v), *region)) for v in order]
        for j, (variant, _) in enumerate(found):
            following = next((pos for _, pos in found[j + 1:] if pos is not None), None)
            end = following - 1 if following is not None else turn.start
            target = variant == intent.get("target_item_id")
            case = "target" if target else "distractor" if variant == intent.get("distractor_item_id") else "other"
            points.append(DecisionPoint(end, target, case, "structured"))
    return points


def _precision(turns: list[_Turn], task: dict[str, Any], **_: Any) -> list[DecisionPoint]:
    acts = {i["order_id"]: i for i in task.get("intents", [])
            if i.get("kind") in _PRECISION_KINDS and i.get("eligible", True)}
    points = []
    for turn in turns:
        intent = _looked_up_intent(turn, acts)
        if intent is None:
            continue
        exact = (intent["kind"] == "modify_address" or (intent["kind"] == "cancel" and intent.get("reason") ==
                 "ordered by mistake") or (intent["kind"] == "return" and bool(intent.get("refund_to_gift_card"))))
        points.append(DecisionPoint(turn.start, exact, "exact_value" if exact else "default_value", "precision",
                                    intent["kind"]))
    return points


_FINDERS = {"precondition": _precondition, "multi_step": _multi_step, "structured": _structured,
            "precision": _precision}


def check_decisions(decisions: Sequence[str]) -> tuple[str, ...]:
    """The decisions as a tuple, each known and none twice."""
    unknown = [d for d in decisions if d not in DECISIONS]
    if unknown or len(set(decisions)) != len(decisions) or not decisions:
        raise ValueError(f"decisions must be distinct names from {DECISIONS}, got {list(decisions)}")
    return tuple(decisions)


def decision_points(messages: Sequence[dict[str, Any]], turns: Sequence[tuple[int, int]],
                    task: dict[str, Any], decisions: Sequence[str] = ("precondition",), ids: Sequence[int] = (),
                    token_id: Callable[[str], int | None] | None = None) -> list[DecisionPoint]:
    """The decision points of one encoded episode, decision by decision (see the module docstring).

    ``turns`` are the renderer's ``(prompt_len, completion_len)`` of each assistant message in order;
    ``ids`` and ``token_id`` (entity id -> its single token) locate candidates inside tool results.
    """
    spans = _turns(messages, turns)
    return [p for d in check_decisions(decisions)
            for p in _FINDERS[d](spans, task, ids=ids, token_id=token_id, messages=messages)]


def _find(ids: Sequence[int], token: int | None, start: int, stop: int) -> int | None:
    if token is None:
        return None
    return next((t for t in range(start, min(stop, len(ids))) if ids[t] == token), None)


def _json(content: str) -> Any:
    try:
        return json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return None


def _order_id(content: str) -> str | None:
    order = _json(content)
    return order.get("order_id") if isinstance(order, dict) else None


def decision_index(points: Sequence[Sequence[DecisionPoint]], decisions: Sequence[str] = ("precondition",)
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, cols, labels, columns)`` tensors of a padded batch's decision points (row = example,
    column = the head output of the point's decision)."""
    column = {d: k for k, d in enumerate(decisions)}
    flat = [(row, p.position, float(p.label), column[p.decision]) for row, ps in enumerate(points) for p in ps]
    rows = torch.tensor([f[0] for f in flat], dtype=torch.long)
    cols = torch.tensor([f[1] for f in flat], dtype=torch.long)
    labels = torch.tensor([f[2] for f in flat], dtype=torch.float32)
    columns = torch.tensor([f[3] for f in flat], dtype=torch.long)
    return rows, cols, labels, columns


class DecisionHead(torch.nn.Module):
    """Linear probes: final hidden state at a decision point -> one logit per decision."""

    def __init__(self, hidden_size: int, decisions: Sequence[str] = ("precondition",)):
        super().__init__()
        self.decisions = check_decisions(decisions)
        self.linear = torch.nn.Linear(hidden_size, len(self.decisions))

    def logits(self, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
               columns: torch.Tensor | None = None) -> torch.Tensor:
        out = self.linear(hidden[rows, cols])
        if columns is None:
            columns = torch.zeros_like(rows)
        return out.gather(-1, columns.unsqueeze(-1)).squeeze(-1)

    def loss(self, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, labels: torch.Tensor,
             columns: torch.Tensor | None = None) -> torch.Tensor:
        """Binary cross-entropy, averaged over each decision's points, then over the decisions present
        (each capability weighs the same; one decision: the mean over its points). 0 without points."""
        if rows.numel() == 0:
            return hidden.sum() * 0.0
        if columns is None:
            columns = torch.zeros_like(rows)
        per_point = torch.nn.functional.binary_cross_entropy_with_logits(
            self.logits(hidden, rows, cols, columns).float(), labels, reduction="none")
        present = columns.unique()
        return torch.stack([per_point[columns == c].mean() for c in present]).mean()


@torch.no_grad()
def head_outcomes(head: DecisionHead, hidden: torch.Tensor,
                  points: Sequence[Sequence[DecisionPoint]]) -> list[tuple[str, str, bool]]:
    """``(decision, case, whether the head said the true value)`` for each decision point of a batch."""
    rows, cols, labels, columns = decision_index(points, head.decisions)
    if rows.numel() == 0:
        return []
    said = (head.logits(hidden, rows, cols, columns) > 0).float()
    flat = [p for ps in points for p in ps]
    return [(p.decision, p.case, ok) for p, ok in zip(flat, (said == labels).tolist())]
