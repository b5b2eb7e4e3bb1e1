"""The ownership circuit: auxiliary losses that teach a two-layer base to compare the looked-up order's owner with
the user it is serving.

On retail-sim a cancel or return is allowed only on the user's own order. Every user id is one token, and the
order the agent looked up belongs to the user exactly when its ``user_id`` token already occurred in the episode
(the user's profile, fetched before any order). Behaviour cloning leaves that comparison half learnt: a linear
probe reads ownership at the decision point at 0.86 balanced, and GRPO on the precondition env then learns to
refuse every other customer's order by refusing half the allowed ones too (docs/research_log.md, sessions 44-46).
The losses below train the comparison as a circuit, in four terms:

* **match** (layer 0): at every user-id token outside assistant turns, head ``match_head`` attends to the earlier
  occurrences of the same token (to position 0 when there is none);
* **lookup** (layer 1): at every precondition decision point, head ``lookup_head`` attends to the user-id token of
  the order just looked up (the last user-id token outside assistant turns before the point);
* **seen** (layer-1 input): a linear readout at that user-id token says whether the token occurred before,
  at weight ``seen_weight``;
* **ownership** (final hidden state): a linear readout at the decision point says the same, at weight
  ``ownership_weight``.

Match and lookup are pointer losses (:func:`trace_train.bootstrap.attention_heads.pointer_nll`) summed at
``pointer_weight``. The readouts are auxiliary heads like the decision head: trained with the stage, saved in
its checkpoint, not with the policy. Session 46's proxy of this stage (400 steps at lr 1e-3 from the base shipped
then, seen weight 5) raised the probe to 0.90 and made the precondition adapter keep 86 of 97 allowed requests
where it had kept 54.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from trace_train.bootstrap.attention_heads import head_query_key_value, pointer_nll
from trace_train.bootstrap.config import OwnershipCircuitConfig
from trace_train.bootstrap.decisions import DecisionPoint

MATCH_LAYER, LOOKUP_LAYER = 0, 1  # the match reads raw tokens; the lookup reads what the match wrote


@dataclass
class OwnershipTargets:
    """The circuit's targets in one encoded episode (positions into its ids).

    ``match_queries[i]`` is a user-id token outside assistant turns and ``match_sources[i]`` its earlier
    occurrences (``[0]`` when none); ``lookup_queries[i]`` a precondition decision point and ``lookup_sources[i]``
    the looked-up order's user-id token; ``seen_labels[i]``: whether that token occurred before it, read at
    ``lookup_sources[i]``; ``owned_labels[i]``: whether the order is the user's (the decision's case is not
    ``ownership``), read at ``lookup_queries[i]``. The two agree unless another customer's id occurred earlier in the
    episode (an earlier lookup of that customer's order): about 2 % of the target's multi-request decisions."""

    match_queries: list[int] = field(default_factory=list)
    match_sources: list[list[int]] = field(default_factory=list)
    lookup_queries: list[int] = field(default_factory=list)
    lookup_sources: list[list[int]] = field(default_factory=list)
    seen_labels: list[bool] = field(default_factory=list)
    owned_labels: list[bool] = field(default_factory=list)


def ownership_targets(ids: Sequence[int], loss_mask: Sequence[int], decisions: Sequence[DecisionPoint],
                      user_tokens: frozenset[int] | set[int]) -> OwnershipTargets:
    """The targets of one episode: ``loss_mask`` 1 on assistant tokens, ``decisions`` its decision points (only the
    precondition ones are read), ``user_tokens`` the token ids of the pool's user ids."""
    out = OwnershipTargets()
    earlier: dict[int, list[int]] = {}
    for t, token in enumerate(ids):
        if token not in user_tokens:
            continue
        if not loss_mask[t]:
            out.match_queries.append(t)
            out.match_sources.append(list(earlier.get(token, [])) or [0])
        earlier.setdefault(token, []).append(t)
    for point in decisions:
        if point.decision != "precondition" or point.position >= len(ids):
            continue
        # the owner: the last user id outside assistant turns at or before the point (the match queries are exactly
        # those tokens, in order)
        index = bisect_right(out.match_queries, point.position) - 1
        if index < 0:
            continue
        owner = out.match_queries[index]
        out.lookup_queries.append(point.position)
        out.lookup_sources.append([owner])
        out.seen_labels.append(earlier[ids[owner]][0] < owner)
        out.owned_labels.append(point.case != "ownership")
    return out


class OwnershipReadouts(torch.nn.Module):
    """The two linear readouts of the circuit: ``seen`` on the layer-1 input, ``ownership`` on the final hidden."""

    def __init__(self, hidden_size: int, generator: torch.Generator | None = None):
        super().__init__()
        self.seen = torch.nn.Linear(hidden_size, 1)
        self.ownership = torch.nn.Linear(hidden_size, 1)
        for linear in (self.seen, self.ownership):
            torch.nn.init.normal_(linear.weight, std=0.02, generator=generator)
            torch.nn.init.zeros_(linear.bias)


@dataclass
class CircuitLoss:
    """The circuit's weighted loss over a batch and its unweighted parts (for the metrics log)."""

    total: torch.Tensor
    parts: dict[str, float]


def ownership_circuit_loss(model: torch.nn.Module, readouts: OwnershipReadouts, cfg: OwnershipCircuitConfig,
                           layer0: Sequence[torch.Tensor], layer1: Sequence[torch.Tensor],
                           final: Sequence[torch.Tensor], targets: Sequence[OwnershipTargets]) -> CircuitLoss | None:
    """The circuit's loss over a batch: ``layer0[i]``, ``layer1[i]`` and ``final[i]`` are episode i's ``(L_i, H)``
    inputs to layers 0 and 1 and final hidden states; ``None`` when the batch holds no target at all."""
    body = model.model
    if len(body.layers) < 2:
        raise ValueError("the ownership circuit needs a model with at least two decoder layers")
    match, lookup, seen, owned = [], [], [], []
    for states0, states1, states_final, episode in zip(layer0, layer1, final, targets):
        if episode.match_queries:
            query, key, _ = head_query_key_value(body, states0, cfg.match_head, MATCH_LAYER)
            scaling = body.layers[MATCH_LAYER].self_attn.scaling
            match.append(pointer_nll(query, key, scaling, episode.match_queries, episode.match_sources))
        if episode.lookup_queries:
            query, key, _ = head_query_key_value(body, states1, cfg.lookup_head, LOOKUP_LAYER)
            scaling = body.layers[LOOKUP_LAYER].self_attn.scaling
            lookup.append(pointer_nll(query, key, scaling, episode.lookup_queries, episode.lookup_sources))
            seen_labels = torch.as_tensor(episode.seen_labels, dtype=torch.float32, device=states1.device)
            owned_labels = torch.as_tensor(episode.owned_labels, dtype=torch.float32, device=states1.device)
            owners = torch.as_tensor([s[0] for s in episode.lookup_sources], device=states1.device)
            points = torch.as_tensor(episode.lookup_queries, device=states1.device)
            seen.append(_bce(readouts.seen(states1[owners])[:, 0], seen_labels))
            owned.append(_bce(readouts.ownership(states_final[points])[:, 0], owned_labels))
    parts = {name: torch.cat(terms).mean() for name, terms in
             (("match", match), ("lookup", lookup), ("seen", seen), ("ownership", owned)) if terms}
    if not parts:
        return None
    weights = {"match": cfg.pointer_weight, "lookup": cfg.pointer_weight, "seen": cfg.seen_weight,
               "ownership": cfg.ownership_weight}
    total = sum(weights[name] * value for name, value in parts.items())
    return CircuitLoss(total, {name: value.item() for name, value in parts.items()})


def _bce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")


def user_id_tokens(entity_ids: dict[int, str]) -> frozenset[int]:
    """The user-id tokens among a tokenizer's entity ids (``trace_train.bootstrap.data.entity_token_ids``)."""
    return frozenset(token for token, kind in entity_ids.items() if kind == "user_id")
