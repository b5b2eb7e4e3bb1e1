"""The house's data flows one way: the envs import no trainer, the MoE layer no trainer, no library module
imports the CLI, and no library modules import one another in a circle. Checked on the AST of every module
(imports inside functions count too; imports under ``if TYPE_CHECKING:`` do not, they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trace_envs", "trace_moe", "trace_train")
LIBRARY = (*PACKAGES, "generated_envs")
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


def module_files(packages: tuple[str, ...], root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` (a package is its ``__init__.py``)."""
    files = {}
    for package in packages:
        for path in _modules(package, root):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_imports(name: str, path: Path, files: dict[str, Path]) -> set[str]:
    """The modules of ``files`` that module ``name`` imports when it runs: ``from a import b`` is module ``a.b``
    when that is a module, else ``a``; the body of ``if TYPE_CHECKING:`` is skipped (its ``else`` is not)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in files)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.update([full] if full in files else [base] if base in files else [])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    found.discard(name)
    return found


def import_cycles(packages: tuple[str, ...], root: Path = ROOT) -> list[list[str]]:
    """Every set of two or more modules that import one another in a circle (strongly connected components of
    the import graph, Tarjan), each sorted."""
    files = module_files(packages, root)
    graph = {name: sorted(module_imports(name, path, files)) for name, path in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    return sorted(cycles)


def test_the_cycle_check_sees_lazy_imports_and_skips_type_checking_ones(tmp_path):
    pkg = tmp_path / "trace_envs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from trace_envs.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from trace_envs import c\n")
    (pkg / "c.py").write_text("from . import a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trace_envs.e import E\n")
    (pkg / "e.py").write_text("from trace_envs.d import x\n")
    assert import_cycles(("trace_envs",), tmp_path) == [["trace_envs.a", "trace_envs.b", "trace_envs.c"]]
    (pkg / "d.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import trace_envs.e\n")
    assert import_cycles(("trace_envs",), tmp_path) == [["trace_envs.a", "trace_envs.b", "trace_envs.c"],
                                                        ["trace_envs.d", "trace_envs.e"]]


def test_no_library_modules_import_one_another_in_a_circle():
    assert import_cycles(LIBRARY) == []
