"""Emitted capability envs: a ``manifest.json`` of rows that :func:`load` turns into Gymnasium registrations.

A row is data. A template-family row ``{"env_id", "family", "domain", "knobs", ...}`` registers
``env_id`` with the family's entry point (looked up in ``trace_envs.families.FAMILIES``, never taken from the
row) and ``domain`` + ``knobs`` as kwargs. Only a row with a ``module`` (an LLM-written env module that passed the
sandboxed validator) names code: that module, beside the manifest, is imported and registers its id itself.

``load()`` (run on ``import trace_envs``) reads the rows shipped in this package's ``manifest.json`` and the
user's own under :func:`user_dir` (where ``trace-rl synthesize`` writes by default); envs emitted elsewhere (a
pipeline run directory, a test's tmp dir) are registered with an explicit ``load(directory)``. Nothing is ever
written into this package. A bad row is skipped with a warning, so deleting a row unregisters its env.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PACKAGE_DIR = Path(__file__).resolve().parent


def generated_dir() -> Path:
    """This package's folder: its ``manifest.json`` holds the rows shipped with trace-rl (read-only)."""
    return PACKAGE_DIR


def user_dir() -> Path:
    """The user's emitted envs (``~/.local/share/trace-rl/generated_envs``): the default of ``trace-rl synthesize``."""
    return Path.home() / ".local" / "share" / "trace-rl" / "generated_envs"


def read_manifest(directory: str | os.PathLike | None = None) -> dict[str, Any]:
    path = Path(directory or generated_dir()) / MANIFEST
    if not path.exists():
        return {"envs": []}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        logger.warning("%s is not valid JSON (%s); no emitted envs registered", path, exc)
        return {"envs": []}
    if not isinstance(doc, dict) or not isinstance(doc.get("envs", []), list):
        logger.warning("%s: expected {\"envs\": [...]}; no emitted envs registered", path)
        return {"envs": []}
    doc.setdefault("envs", [])
    return doc


def register_row(entry: dict[str, Any], directory: str | os.PathLike | None = None) -> str | None:
    """Register one manifest row; returns its env id, or None (with a warning) when the row is unusable."""
    env_id = str(entry.get("env_id", ""))
    if entry.get("module"):
        return _import_module_row(entry, Path(directory or generated_dir()))
    from trace_envs.families import FAMILIES
    from trace_envs.registry import NAMESPACE, register_env, unregister_env

    family = entry.get("family") or entry.get("capability")
    prefix, suffix = f"{NAMESPACE}/", "-v0"
    if family not in FAMILIES:
        logger.warning("generated env %s: unknown family %r (known: %s); skipped", env_id, family, sorted(FAMILIES))
        return None
    if not (env_id.startswith(prefix) and env_id.endswith(suffix)) or not isinstance(entry.get("knobs", {}), dict):
        logger.warning("generated env %r: needs env_id trace/<name>-v0 and a knobs mapping; skipped", env_id)
        return None
    kwargs = {**({"domain": entry["domain"]} if entry.get("domain") else {}), **(entry.get("knobs") or {})}
    if env_id in {f"{prefix}{name}{suffix}" for name in FAMILIES}:
        logger.warning("generated env %s: a row may not take a family's own id; skipped", env_id)
        return None
    spec = gym.registry.get(env_id)
    if spec is not None and spec.entry_point != FAMILIES[family]:
        logger.warning("generated env %s: the id belongs to another env (%s); skipped", env_id, spec.entry_point)
        return None
    if spec is not None and dict(spec.kwargs) != kwargs:  # a later manifest (the run's own) wins, said aloud
        logger.info("generated env %s: re-registered with the knobs of %s (%s, was %s)", env_id,
                    Path(directory or generated_dir()) / MANIFEST, kwargs, dict(spec.kwargs))
        unregister_env(env_id)
    return register_env(env_id[len(prefix):-len(suffix)], FAMILIES[family], **kwargs)


_MODULE_SPECS: dict[str, Any] = {}  # imported wrapper module name -> the EnvSpec its import registered


def _module_name(module_file: Path) -> str:
    """``generated_envs.<stem>_<hash of the folder>``: two folders' ``<capability>_llm.py`` stay two modules."""
    folder = hashlib.sha256(str(module_file.resolve().parent).encode("utf-8")).hexdigest()[:12]
    return f"generated_envs.{module_file.stem}_{folder}"


def _import_module_row(entry: dict[str, Any], directory: Path) -> str | None:
    """Import the row's module, which registers ``env_id``; the module a later folder holds for an id already
    registered from another replaces it, said aloud (an id registered by other code is left alone)."""
    env_id = str(entry.get("env_id"))
    module_file = directory / str(entry["module"])
    if not module_file.is_file():
        logger.warning("generated env %s: module %s is missing; skipped", env_id, module_file)
        return None
    name = _module_name(module_file)
    before = gym.registry.get(env_id)
    if name in sys.modules and before is not None and _MODULE_SPECS.get(name) is before:
        return env_id  # this folder's module registered it already
    spec = importlib.util.spec_from_file_location(name, module_file)
    if spec is None or spec.loader is None:
        logger.warning("generated env %s: cannot import %s; skipped", env_id, module_file)
        return None
    module = importlib.util.module_from_spec(spec)
    gym.registry.pop(env_id, None)  # register_env keeps an existing id: let this module's registration in
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:  # a broken emitted module must not break `import trace_envs`
        sys.modules.pop(name, None)
        _restore(env_id, before)
        logger.exception("generated env %s: importing %s failed; skipped", env_id, module_file)
        return None
    after = gym.registry.get(env_id)
    if after is None:
        _restore(env_id, before)
        logger.warning("generated env %s: %s does not register that id; skipped", env_id, module_file)
        return None
    if before is not None and before.entry_point != after.entry_point:
        _restore(env_id, before)
        logger.warning("generated env %s: the id belongs to another env (%s); %s skipped", env_id,
                       before.entry_point, module_file)
        return None
    if before is not None and dict(before.kwargs) != dict(after.kwargs):  # a later manifest wins, said aloud
        logger.info("generated env %s: re-registered from %s (%s, was %s)", env_id, module_file,
                    dict(after.kwargs), dict(before.kwargs))
    _MODULE_SPECS[name] = after
    return env_id


def _restore(env_id: str, spec: Any) -> None:
    gym.registry.pop(env_id, None)
    if spec is not None:
        gym.registry[env_id] = spec


def load(directory: str | os.PathLike | None = None) -> list[str]:
    """Register every row of ``directory``'s manifest (default: the shipped rows, then :func:`user_dir`'s)."""
    if directory is not None:
        directories = [Path(directory)]
    else:
        directories = [generated_dir()]
        try:
            directories.append(user_dir())
        except (RuntimeError, KeyError) as exc:  # no HOME and no passwd entry: there is no user folder to read
            logger.warning("the home directory cannot be determined (%s); the user's emitted envs are not "
                           "registered", exc)
    ids: list[str] = []
    for folder in directories:
        for entry in read_manifest(folder)["envs"]:
            if not isinstance(entry, dict):
                logger.warning("%s: manifest row %r is not an object; skipped", folder / MANIFEST, entry)
                continue
            env_id = register_row(entry, folder)
            if env_id is not None:
                ids.append(env_id)
    return ids
