"""Shared test setup: one torch thread (two threads on a contended 2-core box are 14-30x slower)."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        yield
        return
    torch.set_num_threads(1)
    yield
