"""``bootstrap.packing=packed``: the same episodes and loss as the padded batch, run as one row per batch."""

import pytest
import torch

from trace_envs.config_builder import ConfigError
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import batches, pad_batch
from trace_train.grpo.packing import packed_hidden_states
from trace_train.model import ChatRenderer, build_model, load_policy
from trace_train.paths import REPO_ROOT

TINY = dict(steps=6, batch_size=3, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=3, warmup_steps=2,
            lr=3e-3, max_len=1024, threads=1, copy_loss_weight=1.0, decision_loss_weight=1.0)
SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"


def test_packed_hidden_states_equal_the_padded_forward_on_bc_batches():
    torch.set_num_threads(1)
    model, tokenizer = load_policy(SHIPPED)
    model.eval()
    cfg = BootstrapConfig(batch_size=4)
    _, examples, _ = next(batches(cfg, ChatRenderer(tokenizer), 0))
    lengths = [len(e.ids) for e in examples]
    assert len(set(lengths)) > 1  # the batch really pads
    ids, attn, _, _ = (torch.from_numpy(a) for a in pad_batch(examples, tokenizer.pad_token_id))
    with torch.no_grad():
        padded = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
        packed = packed_hidden_states(model.model, [e.ids for e in examples])
    assert packed.shape == padded.shape
    for row, n in enumerate(lengths):
        torch.testing.assert_close(packed[row, :n], padded[row, :n], rtol=1e-4, atol=1e-5)
        assert not packed[row, n:].any()  # zeros past each episode, never another episode's states
    assert model.config._attn_implementation == "sdpa"  # the packed kernel is switched off again


def test_a_packed_bootstrap_trains_the_same_maths_as_the_padded_one(tmp_path):
    padded = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path / "padded")
    packed = bc.Bootstrapper(BootstrapConfig(**TINY, packing="packed"), tmp_path / "packed")
    assert packed.config_hash != padded.config_hash  # other bits: another model in the cache
    padded.run(progress=False)
    packed.run(progress=False)
    a, _ = load_policy(padded.model_dir)
    b, _ = load_policy(packed.model_dir)
    moved = max(float((x - y).abs().max()) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    untrained = build_model("tiny", load_policy(padded.model_dir)[1], seed=0).state_dict()
    trained = max(float((x - untrained[k]).abs().max()) for k, x in a.state_dict().items())
    assert moved < 1e-2 * trained  # apart by rounding only (~4e-4 of the distance travelled in six AdamW steps)


def test_packing_is_validated_inherited_by_the_stages_below_and_absent_from_padded_hashes():
    with pytest.raises(ConfigError, match="bootstrap.packing must be one of"):
        BootstrapConfig.from_dict({"packing": "bucketed"})
    parent = {**TINY, "steps": 4}
    child = BootstrapConfig.from_dict({**TINY, "packing": "packed", "init_from": parent})
    assert child.parent.packing == "packed"
    own = BootstrapConfig.from_dict({**TINY, "packing": "packed", "init_from": {**parent, "packing": "none"}})
    assert own.parent.packing == "none"
    assert own.parent.content_hash() == BootstrapConfig(**parent).content_hash()  # padding: the hash it always had
    assert child.parent.content_hash() != own.parent.content_hash()


def test_atomic_numbers_are_validated_inherited_by_the_stages_below_and_absent_from_hashes_without_them():
    with pytest.raises(ConfigError, match="bootstrap.atomic_numbers must be >= 0"):
        BootstrapConfig.from_dict({"atomic_numbers": -1})
    parent = {**TINY, "steps": 4}
    plain = BootstrapConfig.from_dict({**TINY, "init_from": parent})
    numbered = BootstrapConfig.from_dict({**TINY, "atomic_numbers": 500, "init_from": parent})
    assert numbered.parent.atomic_numbers == 500  # the first stage trains the tokenizer the chain keeps
    digits = BootstrapConfig.from_dict({**TINY, "atomic_numbers": 0, "init_from": parent})
    assert plain.content_hash() == digits.content_hash()
    assert numbered.parent.content_hash() != plain.parent.content_hash()
    assert numbered.content_hash() != plain.content_hash()
    mixed = BootstrapConfig.from_dict({**TINY, "atomic_numbers": 500, "init_from": {**parent, "atomic_numbers": 0}})
    with pytest.raises(ValueError, match="keeps the first stage's tokenizer"):
        _ = mixed.parent
