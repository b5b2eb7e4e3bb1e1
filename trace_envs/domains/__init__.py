"""Domains the capability env families run on (``domain=`` env kwarg)."""

from __future__ import annotations

from typing import Callable

from trace_envs.domains.base import GUARD_CASES, Domain, Request

_FACTORIES: dict[str, Callable[[], Domain]] = {}


def register_domain(name: str, factory: Callable[[], Domain]) -> None:
    """Make ``domain=name`` available to every family (e.g. a τ²-Bench adapter)."""
    _FACTORIES[name] = factory


def known_domains() -> list[str]:
    return sorted(_FACTORIES)


def get_domain(name: str) -> Domain:
    """A fresh domain instance; unknown names raise a ``ValueError`` listing the known ones."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown domain {name!r}; known domains: {', '.join(known_domains())}")
    return _FACTORIES[name]()


def _retail_sim() -> Domain:
    from trace_envs.domains.retail_sim import RetailSimDomain

    return RetailSimDomain()


register_domain("retail-sim", _retail_sim)

__all__ = ["Domain", "GUARD_CASES", "Request", "get_domain", "known_domains", "register_domain"]
