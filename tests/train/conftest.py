"""Fixtures shared by the CLI validation tests."""

import pytest


@pytest.fixture()
def no_model_load(monkeypatch):
    """Loading any model fails the test: validation must come first."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before validation")

    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", refuse)
    import trace_train.model.factory as factory

    monkeypatch.setattr(factory, "load_policy", refuse)
