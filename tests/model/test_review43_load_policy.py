"""Review 43, finding 4: weights that do not match config.json are a PolicyLoadError, never a model with tensors
initialised at random nor a raw traceback."""

import json
import re
import shutil

import pytest
from safetensors.torch import load_file, save_file

from trace_train.model import PolicyLoadError, build_model, load_policy, save_policy


@pytest.fixture(scope="module")
def saved(tokenizer, tmp_path_factory):
    return save_policy(build_model("tiny", tokenizer, seed=0), tokenizer, tmp_path_factory.mktemp("saved") / "p")


def _without(weights, name):
    weights.pop(name)
    return weights


def _edit_config(**changes):
    return lambda config: config.update(changes)


@pytest.mark.parametrize("weights,config,says", [
    (lambda w: _without(w, "model.layers.0.mlp.down_proj.weight"), None, r"missing keys model.layers.0.mlp.down_proj"),
    (None, _edit_config(tie_word_embeddings=False), r"missing keys lm_head.weight"),
    (None, _edit_config(vocab_size=4000),
     r"mismatched keys model.embed_tokens.weight \(\[\d+, 128\] in the weights, \[4000, 128\] by config.json\)"),
    (None, _edit_config(num_hidden_layers=3), "num_hidden_layers"),  # huggingface_hub's StrictDataclassError
])
def test_weights_that_do_not_match_the_config_raise_policy_load_error(saved, tmp_path, weights, config, says):
    target = tmp_path / "policy"
    shutil.copytree(saved, target)
    if weights is not None:
        save_file(weights(load_file(target / "model.safetensors")), target / "model.safetensors",
                  metadata={"format": "pt"})
    if config is not None:
        data = json.loads((target / "config.json").read_text())
        config(data)
        (target / "config.json").write_text(json.dumps(data))
    with pytest.raises(PolicyLoadError, match="local directory") as info:
        load_policy(target)
    message = str(info.value)
    assert str(target) in message and re.search(says, message) and "\n" not in message, message


def test_a_tensor_the_model_does_not_use_is_logged_and_the_rest_loads(saved, tmp_path, caplog):
    """Extra tensors (some hub checkpoints carry heads the causal LM does not use) are not a reason to refuse."""
    target = tmp_path / "policy"
    shutil.copytree(saved, target)
    weights = load_file(target / "model.safetensors")
    save_file({**weights, "model.extra.weight": weights["model.norm.weight"].clone()}, target / "model.safetensors",
              metadata={"format": "pt"})
    with caplog.at_level("WARNING", logger="trace_train.model.factory"):
        model, _ = load_policy(target)
    assert "model.extra.weight" in caplog.text
    assert model.model.norm.weight.equal(weights["model.norm.weight"])


def test_a_complete_checkpoint_still_loads(saved):
    model, _ = load_policy(saved)
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
