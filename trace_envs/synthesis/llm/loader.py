"""Gymnasium entry point of an emitted LLM-written env: loads its *validated* source by path.

The manifest pins the source's sha256; a file that no longer matches (edited after validation) or no
longer passes the static check is refused, never imported.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path
from typing import Any

from trace_envs.core.time_limit import CallTimeout, time_limit
from trace_envs.synthesis.llm.authoring import CapabilityEnv
from trace_envs.synthesis.llm.static import check_source

ENTRY_POINT = "trace_envs.synthesis.llm.loader:make_env"
IMPORT_TIME_LIMIT_S = 30.0  # a module whose top level loops would hang the host that imports it


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
        # the text just checked is what runs (importlib would read the file again, or a stale __pycache__)
        module = types.ModuleType(name)
        module.__file__ = str(path)
        code = compile(text, str(path), "exec")
        try:
            with time_limit(IMPORT_TIME_LIMIT_S, f"importing {path}"):
                exec(code, module.__dict__)  # noqa: S102 - validated source (static check + confined probe)
        except CallTimeout as exc:
            raise TimeoutError(str(exc)) from None
        sys.modules[name] = module
    cls = getattr(module, "Env", None)
    if not (isinstance(cls, type) and issubclass(cls, CapabilityEnv)):
        raise TypeError(f"{path}: Env is not a CapabilityEnv subclass")
    return cls


def make_env(source: str, sha256: str, **kwargs: Any) -> CapabilityEnv:
    """``gym.make`` entry point: ``source`` (the module path) and ``sha256`` come from the registration."""
    return load_env_class(source, sha256)(**kwargs)
