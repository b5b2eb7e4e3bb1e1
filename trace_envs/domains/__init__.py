"""Domains the capability env families run on (``domain=`` env kwarg)."""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=None)
def _tau2_domain(name: str) -> Domain:
    """One shared (stateless) instance per τ² domain: building it reads tau2's DB and policy."""
    from trace_envs.tau2.runtime import Tau2NotInstalled, tau2_available

    if not tau2_available():
        from trace_envs.tau2.runtime import INSTALL_HINT

        raise Tau2NotInstalled(INSTALL_HINT)
    if name == "tau2-airline":
        from trace_envs.domains.tau2_airline import Tau2AirlineDomain

        return Tau2AirlineDomain()
    from trace_envs.domains.tau2_retail import Tau2RetailDomain

    return Tau2RetailDomain()


register_domain("tau2-airline", lambda: _tau2_domain("tau2-airline"))
register_domain("tau2-retail", lambda: _tau2_domain("tau2-retail"))

__all__ = ["Domain", "GUARD_CASES", "Request", "get_domain", "known_domains", "register_domain"]
