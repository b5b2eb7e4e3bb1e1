import hashlib
import json
import subprocess
import sys
import time

import pytest

from tests.model.tiny_domain import ATOMIC, make_corpus
from trace_train.model import atomic_token_ids, build_tokenizer
from trace_train.model.tokenizer import MARKUP_TOKENS, SPECIAL_TOKENS


def test_every_atomic_id_is_one_token_in_context(tokenizer):
    for atom in ATOMIC:
        for text in (f'{{"order_id": "{atom}"}}', f'{{"order_id":"{atom}"}}', f"id {atom}.", f"({atom})", atom):
            ids = tokenizer.encode(text, add_special_tokens=False)
            tokens = tokenizer.convert_ids_to_tokens(ids)
            assert tokens.count(atom) == 1, (text, tokens)
            assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_atomic_ids_do_not_match_inside_words(tokenizer):
    ids = tokenizer.encode("12345678", add_special_tokens=False)  # contains the zip "12345"
    assert "12345" not in tokenizer.convert_ids_to_tokens(ids)


def test_control_tokens_are_single_and_digits_split(tokenizer):
    for tok in SPECIAL_TOKENS + MARKUP_TOKENS:
        assert len(tokenizer.encode(tok, add_special_tokens=False)) == 1
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert len(tokenizer.encode("987654", add_special_tokens=False)) == 6
    assert atomic_token_ids(tokenizer, ATOMIC[:3])
    with pytest.raises(KeyError):
        atomic_token_ids(tokenizer, ["#W0000000"])


def test_rejects_non_ascii_atomic():
    with pytest.raises(ValueError, match="ASCII"):
        build_tokenizer(["some text here"] * 5, ["josé_1"], vocab_size=300)


def test_deterministic_and_fast(tmp_path):
    corpus = make_corpus(80, seed=1)
    start = time.perf_counter()
    a = build_tokenizer(corpus, ATOMIC, vocab_size=500, seed=3)
    assert time.perf_counter() - start < 10.0
    a.save_pretrained(tmp_path / "a")
    # A fresh process with another hash seed must produce the byte-identical tokenizer.json.
    code = (
        "import sys; from tests.model.tiny_domain import ATOMIC, make_corpus;"
        "from trace_train.model import build_tokenizer;"
        "build_tokenizer(make_corpus(80, seed=1), ATOMIC, vocab_size=500, seed=3).save_pretrained(sys.argv[1])"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b")], check=True,
                   env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    digest = [hashlib.sha256((tmp_path / d / "tokenizer.json").read_bytes()).hexdigest() for d in "ab"]
    assert digest[0] == digest[1]
    cfg = json.loads((tmp_path / "a" / "tokenizer_config.json").read_text())
    assert "chat_template" in cfg or (tmp_path / "a" / "chat_template.jinja").exists()
