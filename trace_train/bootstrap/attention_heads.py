"""One attention head of the decoder, recomputed outside its forward: what the auxiliary pointer losses train.

The number-copy loss (:mod:`trace_train.bootstrap.number_copy`) and the ownership circuit
(:mod:`trace_train.bootstrap.ownership_circuit`) both supervise where a single head attends: they capture the
hidden states entering a layer (:func:`layer_inputs`), recompute that head's query and key from them
(:func:`head_query_key_value`) and take ``-log`` of the attention mass on the wanted source positions
(:func:`pointer_nll`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb


@contextmanager
def layer_inputs(body: torch.nn.Module, layers: Sequence[int]) -> Iterator[dict[int, list[torch.Tensor]]]:
    """Within the block, every forward of the decoder ``body`` appends the hidden states entering each of
    ``layers`` (indices into ``body.layers``, negative from the end) to ``captured[layer]``."""
    captured: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    handles = []
    for layer in layers:
        def hook(_module, args, kwargs, into=captured[layer]):
            into.append(args[0] if args else kwargs["hidden_states"])

        handles.append(body.layers[layer].register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def head_query_key_value(body: torch.nn.Module, states: torch.Tensor, head: int, layer: int = -1):
    """Query, key and value ``(L, head_dim)`` of query head ``head`` of ``body.layers[layer]`` for one sequence's
    input ``states`` ``(L, H)`` (positions 0..L-1; the key and value are those of the head's key/value group)."""
    block = body.layers[layer]
    attention = block.self_attn
    heads, groups = body.config.num_attention_heads, body.config.num_key_value_heads
    if not 0 <= head < heads:
        raise ValueError(f"head {head} does not exist: layer {layer} has {heads} query heads")
    x = block.input_layernorm(states)[None]  # (1, L, H)
    length, dim = states.shape[0], attention.head_dim
    kv_head = head // (heads // groups)
    shape = (1, length, -1, dim)
    query = attention.q_proj(x).view(shape)[:, :, head: head + 1]
    key = attention.k_proj(x).view(shape)[:, :, kv_head: kv_head + 1]
    if hasattr(attention, "q_norm"):  # Qwen3 normalises each head's query and key
        query, key = attention.q_norm(query), attention.k_norm(key)
    cos, sin = body.rotary_emb(states[None], torch.arange(length, device=states.device)[None])
    query, key = apply_rotary_pos_emb(query.transpose(1, 2), key.transpose(1, 2), cos, sin)
    value = attention.v_proj(x).view(shape)[0, :, kv_head]
    return query[0, 0], key[0, 0], value


def pointer_nll(query: torch.Tensor, key: torch.Tensor, scaling: float, queries: Sequence[int],
                sources: Sequence[Sequence[int]]) -> torch.Tensor:
    """``-log`` of the causal attention mass that query position ``queries[i]`` puts on the positions
    ``sources[i]`` (each ``<= queries[i]``), one term per query."""
    at = torch.as_tensor(list(queries), device=query.device)
    scores = (query[at] @ key.T) * scaling
    positions = torch.arange(key.shape[0], device=key.device)
    log_attention = scores.masked_fill(positions[None] > at[:, None], float("-inf")).log_softmax(-1)
    wanted = torch.zeros_like(log_attention, dtype=torch.bool)
    for row, where in enumerate(sources):
        wanted[row, list(where)] = True
    return -log_attention.masked_fill(~wanted, float("-inf")).logsumexp(-1)
