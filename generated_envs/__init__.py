"""Emitted capability envs (``trace-rl synthesize``). ``load()`` imports every module listed in
``manifest.json`` (each registers its id on import); it runs on ``import trace_envs``.

The default directory is this package's folder; envs emitted elsewhere (a run directory, a test's tmp
dir) are registered with an explicit ``load(directory)``. A manifest entry whose module file is missing is skipped
with a warning, so deleting a module unregisters its env.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PACKAGE_DIR = Path(__file__).resolve().parent


def generated_dir() -> Path:
    return PACKAGE_DIR


def read_manifest(directory: str | os.PathLike | None = None) -> dict[str, Any]:
    path = Path(directory or generated_dir()) / MANIFEST
    if not path.exists():
        return {"envs": []}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        logger.warning("%s is not valid JSON (%s); no emitted envs registered", path, exc)
        return {"envs": []}
    doc.setdefault("envs", [])
    return doc


def load(directory: str | os.PathLike | None = None) -> list[str]:
    """Import every emitted module of the manifest; returns the env ids now registered."""
    directory = Path(directory or generated_dir())
    ids: list[str] = []
    for entry in read_manifest(directory)["envs"]:
        module_file = directory / str(entry.get("module", ""))
        if not entry.get("module") or not module_file.is_file():
            logger.warning("generated env %s: module %s is missing; skipped", entry.get("env_id"), module_file)
            continue
        name = f"generated_envs.{module_file.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, module_file)
            if spec is None or spec.loader is None:
                logger.warning("generated env %s: cannot import %s; skipped", entry.get("env_id"), module_file)
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception:  # a broken emitted module must not break `import trace_envs`
                sys.modules.pop(name, None)
                logger.exception("generated env %s: importing %s failed; skipped", entry.get("env_id"), module_file)
                continue
        ids.append(str(entry.get("env_id")))
    return ids
