"""Number copying: an auxiliary loss that teaches one head of the last layer to copy the numbers the agent restates.

The base copies an entity id because tool results echo the ids they were called with (the copy loss trains that
on every episode), but no episode echoes a price, a bound or a total, so behaviour cloning alone leaves the base
writing memorised values: teacher forced, a packed chain with every integer below 1,000 one token wrote 1.7 % of
the assistant's numbers right (docs/research_log.md, session 23). Diagnosed on that chain (session 25 there), head 0
of the last layer attended most to the number to copy for 1 of 234, and once trained to find it, still did not write
it: the value path of number tokens was never trained. The loss below trains both paths of head :data:`COPY_HEAD` of
the last decoder layer:

* **pointer**: from the position before each assistant number token that occurred earlier outside assistant turns,
  the head's attention puts its mass on those earlier occurrences (``-log`` of that mass, averaged over the
  restated numbers);
* **value**: what the head writes from a number token alone (its value through its slice of the output projection,
  the final norm and the tied LM head) is that token (cross-entropy, averaged over the numbers of tool and user
  turns).

Numbers must be single tokens (``bootstrap.atomic_numbers``), so "the earlier occurrence" is one position.
With ``bootstrap.number_copy_entities`` the same loss covers the pool's entity ids (single tokens too): the
atomic-number chain had lost the copying of the order the user named (docs/research_log.md, session 26), and the
pointer term restores it. An :class:`Evidence` covers a value the user states in other words (a cancel reason): the head
points at the phrase and writes the value from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from trace_train.bootstrap.attention_heads import head_query_key_value, layer_inputs, pointer_nll

COPY_HEAD = 0  # the query head of the last layer that learns to copy numbers


@dataclass
class NumberCopies:
    """Where one episode copies numbers: ``queries[i]`` predicts an assistant number stated earlier at
    ``sources[i]`` (its positions outside assistant turns, all ``<= queries[i]``); ``context`` holds every number
    (and evidence cue) position outside assistant turns and ``context_tokens`` the token the head writes from each
    (the value loss's inputs and targets: the number itself, the token a cue states)."""

    queries: list[int] = field(default_factory=list)
    sources: list[list[int]] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    context_tokens: list[int] = field(default_factory=list)


def number_token_ids(tokenizer, atomic_numbers: int) -> frozenset[int]:
    """The token ids of the integers below ``atomic_numbers`` (each one token of a tokenizer built with them)."""
    ids = tokenizer.convert_tokens_to_ids([str(n) for n in range(atomic_numbers)])
    unk = tokenizer.unk_token_id
    missing = [n for n, i in enumerate(ids) if i is None or i == unk]
    if missing:
        raise ValueError(f"the tokenizer lacks atomic number tokens (first missing: {missing[0]}); "
                         "number copying needs a chain trained with bootstrap.atomic_numbers")
    return frozenset(int(i) for i in ids)


@dataclass(frozen=True)
class Evidence:
    """An assistant token the user states in other words: ``phrase`` (token ids) in a user or tool turn states
    ``token``; the head points at the phrase's ``cues`` (the tokens no other evidence phrase has) and writes
    ``token`` from them. E.g. the user's "I ordered it by mistake" states the cancel reason "ordered by mistake"."""

    token: int
    phrase: tuple[int, ...]
    cues: frozenset[int]


def _stated_phrases(ids: Sequence[int], loss_mask: Sequence[int],
                    evidence: Sequence[Evidence]) -> list[tuple[int, int]]:
    """``(position, token stated)`` for every cue of every evidence phrase outside assistant turns, in order."""
    found: list[tuple[int, int]] = []
    for item in evidence:
        width, first = len(item.phrase), item.phrase[0]
        for start in range(len(ids) - width + 1):
            if ids[start] == first and not loss_mask[start] and tuple(ids[start: start + width]) == item.phrase:
                found += [(start + k, item.token) for k in range(width) if item.phrase[k] in item.cues]
    return sorted(found)


def number_copies(ids: Sequence[int], loss_mask: Sequence[int], numbers: frozenset[int],
                  evidence: Sequence[Evidence] = ()) -> NumberCopies:
    """The copy targets of one encoded episode (``loss_mask`` 1 on assistant tokens): each assistant token in
    ``numbers`` stated earlier outside assistant turns, and each evidence token whose phrase was."""
    seen: dict[int, list[int]] = {}
    writes: dict[int, int] = {}  # context position -> the token the head writes from it
    for t, tok in enumerate(ids):
        if tok in numbers and not loss_mask[t]:
            writes[t] = tok
    for t, tok in _stated_phrases(ids, loss_mask, evidence):
        writes[t] = tok
    stated_tokens = {item.token for item in evidence}
    out = NumberCopies()
    for t, tok in enumerate(ids):
        if t in writes:
            out.context.append(t)
            out.context_tokens.append(writes[t])
            seen.setdefault(writes[t], []).append(t)
        elif loss_mask[t] and (tok in numbers or tok in stated_tokens) and t >= 1 and tok in seen:
            out.queries.append(t - 1)
            out.sources.append(list(seen[tok]))
    return out


@contextmanager
def last_layer_input(body: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, every forward of the decoder ``body`` appends the hidden states entering its last layer."""
    with layer_inputs(body, [-1]) as captured:
        yield captured[-1]


def number_copy_loss(model: torch.nn.Module, states: Sequence[torch.Tensor], copies: Sequence[NumberCopies],
                     head: int = COPY_HEAD) -> torch.Tensor | None:
    """Mean pointer loss plus mean value loss over a batch (``states[i]``: episode i's last-layer input,
    ``(L_i, H)``); ``None`` when the batch holds no number at all."""
    body = model.model
    attention = body.layers[-1].self_attn
    dim = attention.head_dim
    out_slice = attention.o_proj.weight[:, head * dim: (head + 1) * dim]
    pointer_terms: list[torch.Tensor] = []
    value_terms: list[torch.Tensor] = []
    for episode_states, episode in zip(states, copies):
        if not episode.context:
            continue
        query, key, value = head_query_key_value(body, episode_states, head)
        if episode.queries:
            pointer_terms.append(pointer_nll(query, key, attention.scaling, episode.queries, episode.sources))
        at = torch.as_tensor(episode.context, device=value.device)
        written = model.lm_head(body.norm(value[at] @ out_slice.T)).float()
        value_terms.append(torch.nn.functional.cross_entropy(
            written, torch.as_tensor(episode.context_tokens, device=written.device), reduction="none"))
    if not value_terms:
        return None
    loss = torch.cat(value_terms).mean()
    if pointer_terms:
        loss = loss + torch.cat(pointer_terms).mean()
    return loss
