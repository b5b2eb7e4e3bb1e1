"""Gymnasium entry point of an emitted LLM-written env: loads its *validated* source by path.

The manifest pins the source's sha256; a file that no longer matches (edited after validation) or no
longer passes the static check is refused, never imported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from trace_envs.synthesis.llm.authoring import CapabilityEnv
from trace_envs.synthesis.llm.static import check_source

ENTRY_POINT = "trace_envs.synthesis.llm.loader:make_env"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_env_class(source: str | Path, sha256: str) -> type[CapabilityEnv]:
    """The ``Env`` class of the validated module at ``source`` (imported once per process)."""
    path = Path(source)
    text = path.read_text(encoding="utf-8")
    if sha256_text(text) != sha256:
        raise ValueError(f"{path}: its sha256 differs from the validated one in the manifest; refusing to import it "
                         "(re-run `trace-rl synthesize` to validate it again)")
    static = check_source(text)
    if not static.ok:
        raise ValueError(f"{path}: fails the static check ({'; '.join(static.problems)}); refusing to import it")
    name = f"trace_llm_envs.m{sha256[:16]}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    cls = getattr(module, "Env", None)
    if not (isinstance(cls, type) and issubclass(cls, CapabilityEnv)):
        raise TypeError(f"{path}: Env is not a CapabilityEnv subclass")
    return cls


def make_env(source: str, sha256: str, **kwargs: Any) -> CapabilityEnv:
    """``gym.make`` entry point: ``source`` (the module path) and ``sha256`` come from the registration."""
    return load_env_class(source, sha256)(**kwargs)
