"""The update's log-probs on sampled positions only equal the full-batch ones, values and gradients."""

import torch
from grpo_toy import tiny_model

from trace_train.grpo.logprobs import masked_token_logprobs, pad_batch, token_logprobs
from trace_train.grpo.lora import LoraSettings, attach_adapter

torch.set_num_threads(1)


def test_masked_logprobs_match_full_logprobs_and_their_gradients():
    model = attach_adapter(tiny_model(), "a", LoraSettings(r=4, alpha=8))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 12, (n,), generator=g).tolist() for n in (9, 14, 6)]
    masks = [[0] * 3 + [1] * 3 + [0] * 2 + [1] * 1, [0] * 4 + [1] * 10, [0, 0, 0, 1, 1, 0]]
    ids, attn, mask = pad_batch(seqs, masks)
    grads = []
    results = []
    for fn in (token_logprobs, masked_token_logprobs):
        model.zero_grad(set_to_none=True)
        args = (model, ids, attn) if fn is token_logprobs else (model, ids, attn, mask)
        lp, ent = fn(*args, temperature=0.7, with_entropy=True)
        ((lp * mask).sum() / mask.sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
        results.append((lp.detach(), ent))
    (full, full_ent), (part, part_ent) = results
    sel = mask > 0
    assert torch.allclose(full[sel], part[sel], atol=1e-5) and bool((part[~sel] == 0).all())
    assert torch.allclose(full_ent[sel], part_ent[sel], atol=1e-5)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6)
    assert any(float(a.abs().sum()) > 0 for a in grads[0])
