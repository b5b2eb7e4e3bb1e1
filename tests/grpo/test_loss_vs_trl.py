"""Our loss on real model log-probs equals TRL's ``GRPOTrainer._compute_loss`` for matching settings."""

import pytest
import torch
from grpo_toy import BOS, VOCAB, tiny_model

from trace_train.grpo.logprobs import pad_batch, token_logprobs
from trace_train.grpo.loss import grpo_loss

torch.set_num_threads(1)
trl = pytest.importorskip("trl")  # dev dependency; installed in CI through the `dev` extra


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t2", bos_token="t1")


def _trl_trainer(tmp_path, model, **kw):
    from datasets import Dataset

    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        report_to="none",
        use_cpu=True,
        bf16=False,
        **kw,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t1 t3"] * 8}),
        processing_class=_tokenizer(),
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def _inputs(model, temperature):
    g = torch.Generator().manual_seed(3)
    B, P, C = 4, 2, 6
    prompt = torch.tensor([[BOS, 3]] * B)
    completion = torch.randint(3, VOCAB, (B, C), generator=g)
    cmask = torch.ones(B, C, dtype=torch.long)
    cmask[1, 4:] = 0
    cmask[3, 2:] = 0
    ids = torch.cat([prompt, completion], 1)
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.cat([torch.ones_like(prompt), cmask], 1), temperature)
    noise = 0.4 * torch.randn(B, C, generator=g) + torch.tensor([[-0.5], [0.4], [0.0], [0.0]])
    old = (lp[:, P:] + noise) * cmask
    ref = (lp[:, P:] - 0.3 * noise.abs()) * cmask
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5])
    return {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": cmask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
    }


def _ours(model, inputs, temperature, **kw):
    P = inputs["prompt_ids"].shape[1]
    seqs, masks = [], []
    for p, c, m in zip(inputs["prompt_ids"], inputs["completion_ids"], inputs["completion_mask"]):
        n = int(m.sum())
        seqs.append(p.tolist() + c[:n].tolist())
        masks.append([0] * P + [1] * n)
    ids, attn, mask = pad_batch(seqs, masks)
    lp, ent = token_logprobs(model, ids, attn, temperature, with_entropy=True)
    L = ids.shape[1]
    old = torch.zeros(len(seqs), L)
    old[:, P:] = inputs["old_per_token_logps"][:, : L - P]
    ref = torch.zeros(len(seqs), L)
    ref[:, P:] = inputs["ref_per_token_logps"][:, : L - P]
    return grpo_loss(lp, old, inputs["advantages"], mask, ref_logprobs=ref, entropy=ent, **kw)


@pytest.mark.parametrize(
    "trl_kw, ours_kw",
    [
        ({"loss_type": "bnpo"}, {"level": "token"}),
        ({"loss_type": "grpo"}, {"level": "token_seq_mean"}),
        ({"loss_type": "grpo", "importance_sampling_level": "sequence"}, {"level": "sequence"}),
        ({"loss_type": "bnpo", "beta": 0.05, "use_bias_correction_kl": False}, {"level": "token", "kl_beta": 0.05}),
    ],
)
def test_loss_and_gradient_equal_trl(tmp_path, trl_kw, ours_kw):
    temperature = 0.7
    model_dir = tmp_path / "tiny"
    tiny_model(0).save_pretrained(model_dir)  # a local path, so TRL can also build its reference model
    trainer = _trl_trainer(
        tmp_path / "trl", str(model_dir), epsilon=0.2, epsilon_high=0.28, temperature=temperature, **trl_kw
    )
    inputs = _inputs(trainer.model, temperature)
    trl_inputs = dict(inputs)
    if not trl_kw.get("beta"):
        trl_inputs.pop("ref_per_token_logps")
    trainer.model.train()
    trl_loss = trainer._compute_loss(trainer.model, trl_inputs)
    trl_loss.backward()
    trl_grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
    trainer.model.zero_grad()

    out = _ours(trainer.model, inputs, temperature, eps_low=0.2, eps_high=0.28, **ours_kw)
    out.loss.backward()
    assert float(out.loss.detach()) == pytest.approx(float(trl_loss.detach()), rel=1e-4, abs=1e-6)
    assert out.metrics["clip_fraction"] > 0  # the comparison exercises clipping
    for n, p in trainer.model.named_parameters():
        assert torch.allclose(p.grad, trl_grads[n], rtol=1e-3, atol=1e-6), n
    trl_entropy = trainer._metrics["train"].get("entropy")
    if trl_entropy:
        assert out.metrics["entropy"] == pytest.approx(trl_entropy[-1], rel=1e-4)
