"""The house's data flows one way: the envs import no trainer, the MoE layer no trainer, and no library
module imports the CLI. Checked on the AST of every module (imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trace_envs", "trace_moe", "trace_train")
CLI = ("trace_train/commands/", "trace_train/cli.py")


def _modules(package: str, root: Path) -> list[Path]:
    files = sorted(p for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts)
    assert files, f"no modules found under {package}"
    return files


def imported_names(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted module name) of every import in ``path``; ``from a import b`` yields ``a`` and ``a.b``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.append((node.lineno, base))
            names.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return names


def violations(package: str, forbidden: tuple[str, ...], exempt: tuple[str, ...] = (),
               root: Path = ROOT) -> list[str]:
    found = []
    for path in _modules(package, root):
        rel = path.relative_to(root).as_posix()
        if any(rel.startswith(e) for e in exempt):
            continue
        for line, name in imported_names(path, root):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{rel}:{line} imports {name}")
    return found


def test_the_ast_walk_sees_nested_and_relative_imports(tmp_path):
    (tmp_path / "trace_envs").mkdir()
    probe = tmp_path / "trace_envs" / "probe.py"
    probe.write_text("import json\n\ndef f():\n"
                     "    from trace_train.commands import rollout\n    from . import records\n")
    names = {n for _, n in imported_names(probe, tmp_path)}
    assert {"json", "trace_train.commands", "trace_train.commands.rollout", "trace_envs.records"} <= names
    assert violations("trace_envs", ("trace_train",), root=tmp_path) == [
        "trace_envs/probe.py:4 imports trace_train.commands",
        "trace_envs/probe.py:4 imports trace_train.commands.rollout"]
    assert violations("trace_envs", ("trace_train",), exempt=("trace_envs/probe.py",), root=tmp_path) == []


@pytest.mark.parametrize("package, forbidden", [
    ("trace_envs", ("trace_train", "trace_moe")),
    ("trace_moe", ("trace_train",)),
])
def test_lower_layers_import_no_higher_one(package, forbidden):
    assert violations(package, forbidden) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_library_code_never_imports_the_cli(package):
    assert violations(package, ("trace_train.commands", "trace_train.cli"), exempt=CLI) == []
