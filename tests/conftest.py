"""Shared test setup: one torch thread (two threads on a contended 2-core box are 14-30x slower), and the fixture
that imports a benchmark script."""

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        yield
        return
    torch.set_num_threads(1)
    yield


@pytest.fixture
def load_benchmark():
    """The benchmark scripts are files, not a package: ``load_benchmark("capability_gain")`` imports one."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
