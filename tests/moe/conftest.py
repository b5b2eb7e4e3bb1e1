from __future__ import annotations

import pytest
import torch

from .moe_helpers import make_adapters, make_base


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A saved tiny Qwen3 base and three random (non-zero) LoRA adapters on it."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("moe")
    base = make_base(root)
    adapters = make_adapters(root, base, n=3)
    return base, adapters
