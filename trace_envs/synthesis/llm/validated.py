"""The text of an emitted LLM-written env module, refused unless it is the validated one, and its ``Env`` class.

The manifest pins the source's sha256; a file that no longer matches (edited after validation) or no longer
passes the static check is refused, never imported. :func:`load_env_class` imports into *the calling
process*: the confined worker (``worker.py``) calls it, the host only through ``make_env(..., confined=False)``.
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

from trace_envs.core.time_limit import CallTimeout, time_limit
from trace_envs.synthesis.llm.authoring import CapabilityEnv
from trace_envs.synthesis.llm.static import check_source

IMPORT_TIME_LIMIT_S = 30.0  # a module whose top level loops would hang the process that imports it


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_validated(source: str | Path, sha256: str) -> str:
    """The text of the module at ``source`` when its sha256 is ``sha256`` and it passes the static check; else
    a ``ValueError`` saying why it is refused."""
    path = Path(source)
    text = path.read_text(encoding="utf-8")
    if sha256_text(text) != sha256:
        raise ValueError(f"{path}: its sha256 differs from the validated one in the manifest; refusing to import it "
                         "(re-run `trace-rl synthesize` to validate it again)")
    static = check_source(text)
    if not static.ok:
        raise ValueError(f"{path}: fails the static check ({'; '.join(static.problems)}); refusing to import it")
    return text


def load_env_class(source: str | Path, sha256: str) -> type[CapabilityEnv]:
    """The ``Env`` class of the validated module at ``source``, imported into *this* process (once per process).

    The confined worker calls it; the host only with ``make_env(..., confined=False)``.
    """
    path = Path(source)
    text = read_validated(path, sha256)
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
