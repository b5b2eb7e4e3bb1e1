import json

import pytest
import torch

from trace_train.model import PolicyLoadError, build_model, count_parameters, load_policy, save_policy


def test_tiny_preset_shape(tokenizer):
    model = build_model("tiny", tokenizer, seed=0)
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (128, 2, 4, 2)
    assert cfg.tie_word_embeddings and cfg.vocab_size == len(tokenizer)
    non_embedding = count_parameters(model) - cfg.vocab_size * cfg.hidden_size
    assert 0.3e6 < non_embedding < 0.5e6  # ~0.39M as measured; ~0.8M in total with a ~3k vocab
    assert count_parameters(build_model("small", tokenizer)) > 2 * count_parameters(model)


def test_seeded_build_and_global_rng_untouched(tokenizer):
    state = torch.random.get_rng_state()
    a, b, c = (build_model("tiny", tokenizer, seed=s) for s in (1, 1, 2))
    assert torch.equal(torch.random.get_rng_state(), state)
    pa, pb, pc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_save_load_identical_logits(tokenizer, tmp_path):
    model = build_model("tiny", tokenizer, seed=0)
    save_policy(model, tokenizer, tmp_path / "policy")
    loaded, tok2 = load_policy(tmp_path / "policy")
    ids = torch.tensor([tokenizer.encode("Please cancel order #W1234567 now", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    text = "#W1234567 x"
    assert tok2.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    assert tok2.chat_template == tokenizer.chat_template


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(PolicyLoadError, match="does not exist"):
        load_policy(tmp_path / "missing")
    with pytest.raises(PolicyLoadError, match="hub"):
        load_policy("Qwen/Qwen3-30B-A3B-Instruct-2507", local_files_only=True)


def test_policy_from_config(tmp_path):
    from omegaconf import OmegaConf

    from tests.model.tiny_domain import ATOMIC, make_corpus
    from trace_train.model import policy_from_config
    from trace_train.paths import CONF_DIR

    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / "tiny.yaml"))
    cfg["tokenizer"]["vocab_size"] = 400
    model, tok = policy_from_config(cfg, make_corpus(), ATOMIC)
    assert model.config.hidden_size == 128 and tok.convert_tokens_to_ids(ATOMIC[0]) >= 400
    save_policy(model, tok, tmp_path / "p")
    loaded, _ = policy_from_config({**cfg, "name_or_path": str(tmp_path / "p")})
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    with pytest.raises(ValueError, match="corpus"):
        policy_from_config(cfg)


@pytest.mark.parametrize("name", ["Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
                                  "Qwen/Qwen3-30B-A3B-Instruct-2507", "gpt2"])
def test_a_hub_id_with_dots_goes_to_the_hub(monkeypatch, name):
    """A hub id is `name` or `org/name`, dots included; no network here, so the loaders are stand-ins."""
    from trace_train.model import factory

    asked = []

    class Loaded:
        def to(self, device):
            return self

        def eval(self):
            return self

    def fake(source, **kwargs):
        asked.append(source)
        if kwargs.get("output_loading_info"):  # the model loader, asked what it could not load
            return Loaded(), {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set()}
        return Loaded()

    monkeypatch.setattr(factory.AutoTokenizer, "from_pretrained", fake)
    monkeypatch.setattr(factory.AutoModelForCausalLM, "from_pretrained", fake)
    load_policy(name, local_files_only=True)
    assert asked == [name, name] and not factory.is_local_path(name)


@pytest.mark.parametrize("name", ["./missing", "../missing/policy", "/abs/missing", "~/missing-policy-dir",
                                  "runs/out/missing", "/abs/Qwen3-0.6B"])
def test_a_missing_local_path_says_it_does_not_exist(monkeypatch, name):
    from trace_train.model import factory

    def never(*args, **kwargs):
        raise AssertionError("a local path must not reach the loaders")

    monkeypatch.setattr(factory.AutoTokenizer, "from_pretrained", never)
    assert factory.is_local_path(name)
    with pytest.raises(PolicyLoadError, match="does not exist"):
        load_policy(name)


def test_an_existing_relative_directory_is_local(tmp_path, monkeypatch):
    from trace_train.model import factory

    (tmp_path / "policy.v2").mkdir()
    monkeypatch.chdir(tmp_path)
    assert factory.is_local_path("policy.v2") and not factory.is_local_path("policy.v3")


def _damaged_copy(tokenizer, tmp_path, name, damage):
    import shutil

    good = tmp_path / "good"
    if not good.exists():
        save_policy(build_model("tiny", tokenizer, seed=0), tokenizer, good)
    target = tmp_path / name.replace(".", "_")
    shutil.copytree(good, target)
    damage(target / name)
    return target


@pytest.mark.parametrize("name,damage,says", [
    ("model.safetensors", lambda p: p.write_bytes(p.read_bytes()[:1000]), "model.safetensors"),
    ("model.safetensors", lambda p: p.write_bytes(b""), "model.safetensors"),
    ("tokenizer.json", lambda p: p.write_text("{}"), "tokenizer"),
    ("tokenizer.json", lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "model": {"vocab": 3}})),
     "tokenizer"),  # the tokenizers library raises a bare Exception
    ("config.json", lambda p: p.write_text("[]"), "config.json"),
])
def test_damaged_policy_files_raise_policy_load_error(tokenizer, tmp_path, name, damage, says):
    target = _damaged_copy(tokenizer, tmp_path, name, damage)
    with pytest.raises(PolicyLoadError, match="local directory") as info:
        load_policy(target)
    message = str(info.value)
    assert str(target) in message and says in message
