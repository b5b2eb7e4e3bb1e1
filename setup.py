"""Build script: maps the repository's top-level asset directories into the ``trace_rl_assets`` package.

``conf/``, ``prompts/`` and ``checkpoints/`` stay at the repository root (the design's layout); in the wheel they
become ``trace_rl_assets/conf`` etc., found at run time through ``importlib.resources`` (``trace_train/paths.py``).
Everything else (metadata, dependencies, extras, entry point) is in ``setup.cfg``.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
ASSET_DIRS = ("conf", "prompts", "checkpoints")
ASSET_PACKAGE = "trace_rl_assets"


def asset_packages() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """One (data-only) package per asset directory and subdirectory, each carrying all of its files."""
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    package_data: dict[str, list[str]] = {}
    for top in ASSET_DIRS:
        package_dir[f"{ASSET_PACKAGE}.{top}"] = top
        for folder in sorted(p for p in [ROOT / top, *(ROOT / top).rglob("*")] if p.is_dir()):
            rel = folder.relative_to(ROOT)
            if any(part.startswith((".", "__")) for part in rel.parts):
                continue
            name = ".".join((ASSET_PACKAGE, *rel.parts))
            packages.append(name)
            package_data[name] = ["*"]
    return packages, package_dir, package_data


code = find_packages(include=["trace_envs*", "trace_train*", "trace_moe*", "generated_envs*", ASSET_PACKAGE])
assets, asset_dirs, asset_data = asset_packages()
setup(
    packages=code + assets,
    package_dir=asset_dirs,
    package_data={
        "": ["*.json", "*.yaml", "*.md", "LICENSE"],
        "trace_envs.tau2": ["data/*.json", "data/tau2-head-tasks/*", "data/tau2-head-tasks/*/*.json"],
        **asset_data,
    },
)
