"""Seeded generator of a small stdlib-only package with one mutated function (code localization).

``generate_task(seed, config)`` builds a layered package (``<pkg>/utils`` -> ``<pkg>/core`` ->
``<pkg>/api``), hidden tests on the public api (expected values from running the reference code),
picks a gold function in ``utils`` or ``core`` that the tests reach, and applies one AST mutation
(comparison / arithmetic operator, constant, swapped if-body, dropped statement). Mutants that break
no test are rejected and the next candidate is tried. All randomness comes from
``random.Random(seed)``; the same seed gives byte-identical files.
"""

from __future__ import annotations

import ast
import copy
import random
from dataclasses import dataclass, field
from typing import Any

from trace_envs.swe.codeloc import kernels as K

_CMP_SWAP = {ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_BIN_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv}


@dataclass(frozen=True)
class GenConfig:
    """Size knobs of a generated package."""

    modules_per_layer: int = 3
    functions_per_module: int = 3
    cases_per_api: int = 2
    max_attempts: int = 40


@dataclass
class Function:
    name: str
    layer: str
    module: str  # repo-relative file path
    source: str  # normalised by ast.unparse
    callees: list[str] = field(default_factory=list)


@dataclass
class CodeLocTask:
    seed: int
    package: str
    base_files: dict[str, str]  # mutated (buggy) tree
    fixed_files: dict[str, str]  # files the gold fix changes, with their fixed content
    hidden_tests: dict[str, str]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    gold_file: str
    gold_function: str
    mutation: str
    buggy_source: str
    fixed_source: str
    problem_statement: str
    meta: dict[str, Any] = field(default_factory=dict)


def _norm(src: str) -> str:
    return ast.unparse(ast.parse(src)) + "\n"


def _build_functions(rng: random.Random, pkg: str, cfg: GenConfig) -> list[Function]:
    domains = rng.sample(K.DOMAINS, cfg.modules_per_layer * 3)
    funcs: list[Function] = []
    used: set[str] = set()
    by_layer: dict[str, list[Function]] = {"utils": [], "core": [], "api": []}
    for li, (layer, kernels, verbs) in enumerate((("utils", K.UTILS, K.UTIL_VERBS), ("core", K.CORE, K.CORE_VERBS),
                                                  ("api", K.API, K.API_VERBS))):
        for m in range(cfg.modules_per_layer):
            domain = domains[li * cfg.modules_per_layer + m]
            path = f"{pkg}/{layer}/{domain}.py"
            for _ in range(cfg.functions_per_module):
                name = f"{rng.choice(verbs)}_{domain}_{rng.choice(('total', 'score', 'level', 'value', 'count'))}"
                while name in used:
                    name += "_v2"
                used.add(name)
                template = rng.choice(kernels)
                fill: dict[str, Any] = {"name": name, "a": rng.randint(2, 9), "b": rng.randint(2, 7),
                                        "c": rng.randint(0, 12)}
                callees = []
                for slot, target in K.CALLEES.items():
                    if "{" + slot + "}" in template:
                        lower = [f for f in by_layer[target] if f.module != path] or by_layer[target]
                        callee = rng.choice(lower)
                        fill[slot] = callee.name
                        callees.append(callee.name)
                fn = Function(name, layer, path, _norm(template.format(**fill)), callees)
                by_layer[layer].append(fn)
                funcs.append(fn)
    return funcs


def _render_files(pkg: str, funcs: list[Function], override: dict[str, str] | None = None) -> dict[str, str]:
    override = override or {}
    by_name = {f.name: f for f in funcs}
    files: dict[str, str] = {f"{pkg}/__init__.py": f'"""{pkg}: generated package."""\n'}
    for layer in ("utils", "core", "api"):
        files[f"{pkg}/{layer}/__init__.py"] = ""
    modules: dict[str, list[Function]] = {}
    for f in funcs:
        modules.setdefault(f.module, []).append(f)
    for path, members in modules.items():
        imports: dict[str, set[str]] = {}
        for f in members:
            for callee in f.callees:
                target = by_name[callee]
                if target.module != path:
                    imports.setdefault(target.module[:-3].replace("/", "."), set()).add(callee)
        lines = [f'"""{path.split("/")[1]} helpers for {path.split("/")[-1][:-3]}."""', ""]
        lines += [f"from {mod} import {', '.join(sorted(names))}" for mod, names in sorted(imports.items())]
        body = "\n\n\n".join(override.get(f.name, f.source).strip() for f in members)
        files[path] = "\n".join(lines) + ("\n\n\n" if imports else "\n\n") + body + "\n"
    return files


def _namespace(funcs: list[Function], override: dict[str, str]) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    for f in funcs:  # callees are always defined before callers (lower layers first)
        exec(compile(override.get(f.name, f.source), f.module, "exec"), ns)  # noqa: S102 - generated code
    return ns


def _call(ns: dict[str, Any], name: str, args: list[int]) -> tuple[str, Any]:
    try:
        return "ok", ns[name](list(args))
    except Exception as exc:  # noqa: BLE001 - a mutant may raise
        return "raise", type(exc).__name__


def _reachable(funcs: list[Function], roots: list[str]) -> set[str]:
    by_name = {f.name: f for f in funcs}
    seen, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(by_name[name].callees)
    return seen


def mutants(source: str) -> list[tuple[str, str]]:
    """Every single-site mutation of a function source: ``[(description, mutated_source)]``."""
    tree = ast.parse(source)
    sites = list(ast.walk(tree))
    out: list[tuple[str, str]] = []
    for idx, node in enumerate(sites):
        kinds: list[str] = []
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _CMP_SWAP:
            kinds.append("flip_comparison")
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
            kinds.append("change_operator")
        if isinstance(node, ast.Constant) and type(node.value) is int:
            kinds += ["constant_plus_one", "constant_minus_one"]
        if isinstance(node, ast.If) and node.orelse == [] and len(node.body) == 1:
            kinds.append("remove_condition")
        if isinstance(node, ast.AugAssign):
            kinds.append("remove_assignment")
        for kind in kinds:
            clone = copy.deepcopy(tree)
            target = list(ast.walk(clone))[idx]
            if kind == "flip_comparison":
                target.ops[0] = _CMP_SWAP[type(target.ops[0])]()
            elif kind == "change_operator":
                target.op = _BIN_SWAP[type(target.op)]()
            elif kind == "constant_plus_one":
                target.value += 1
            elif kind == "constant_minus_one":
                target.value -= 1
            elif kind in ("remove_condition", "remove_assignment"):
                if not _drop(clone, target, kind):
                    continue
            out.append((kind, ast.unparse(clone) + "\n"))
    base, seen, unique = _norm(source), set(), []
    for kind, src in out:
        if src != base and src not in seen:
            seen.add(src)
            unique.append((kind, src))
    return unique


def _drop(tree: ast.AST, target: ast.AST, kind: str) -> bool:
    for parent in ast.walk(tree):
        for fname in ("body", "orelse"):
            block = getattr(parent, fname, None)
            if isinstance(block, list) and target in block:
                i = block.index(target)
                replacement = target.body if kind == "remove_condition" else []
                block[i:i + 1] = replacement or [ast.Pass()]
                return True
    return False


_PHRASES = (
    "Calling `{call}` returns {got}, but {expected} was expected.",
    "`{call}` gives the wrong answer: expected {expected}, got {got}.",
    "After upgrading, `{call}` no longer returns {expected}; it now returns {got}.",
    "Wrong result from the public API: `{call}` -> {got} (should be {expected}).",
)


def generate_task(seed: int, config: GenConfig | None = None) -> CodeLocTask:
    """A validated task for ``seed`` (see module docstring)."""
    cfg = config or GenConfig()
    rng = random.Random(seed)
    for _ in range(cfg.max_attempts):
        pkg = rng.choice(K.PACKAGES)
        funcs = _build_functions(rng, pkg, cfg)
        apis = [f for f in funcs if f.layer == "api"]
        cases = [(f, [rng.randint(-20, 40) for _ in range(rng.randint(3, 7))]) for f in apis
                 for _ in range(cfg.cases_per_api)]
        ref = _namespace(funcs, {})
        expected = [_call(ref, f.name, args) for f, args in cases]
        if any(status != "ok" for status, _ in expected):
            continue
        reach = _reachable(funcs, [f.name for f in apis])
        candidates = [f for f in funcs if f.layer in ("utils", "core") and f.name in reach]
        rng.shuffle(candidates)
        for gold in candidates[:3]:
            options = mutants(gold.source)
            rng.shuffle(options)
            for kind, src in options[:8]:
                ns = _namespace(funcs, {gold.name: src})
                got = [_call(ns, f.name, args) for f, args in cases]
                failing = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
                if not failing or len(failing) == len(cases):
                    continue
                return _assemble(seed, rng, pkg, funcs, cases, expected, got, failing, gold, kind, src)
    raise RuntimeError(f"no valid mutant for seed {seed} after {cfg.max_attempts} attempts")


def _assemble(seed: int, rng: random.Random, pkg: str, funcs: list[Function], cases: list, expected: list,
              got: list, failing: list[int], gold: Function, kind: str, src: str) -> CodeLocTask:
    test_lines = [f"from {f.module[:-3].replace('/', '.')} import {f.name}" for f in funcs if f.layer == "api"]
    ids, counter = [], {}
    for (f, args), (_, value) in zip(cases, expected):
        counter[f.name] = counter.get(f.name, 0) + 1
        tname = f"test_{f.name}_{counter[f.name]}"
        ids.append(f"tests/test_api.py::{tname}")
        test_lines += ["", "", f"def {tname}():", f"    assert {f.name}({args!r}) == {value!r}"]
    tests = {"tests/test_api.py": "\n".join(test_lines) + "\n"}
    buggy = {**_render_files(pkg, funcs, {gold.name: src}), "tests/__init__.py": ""}
    fixed = _render_files(pkg, funcs)
    i = rng.choice(failing)
    f, args = cases[i]
    status, value = got[i]
    shown = f"raises {value}" if status == "raise" else repr(value)
    call = f"{f.module[:-3].replace('/', '.')}.{f.name}({args!r})"
    statement = rng.choice(_PHRASES).format(call=call, got=shown, expected=repr(expected[i][1]))
    statement += "\n\nPlease find the cause; the rest of the public API seems to work."
    return CodeLocTask(
        seed=seed, package=pkg, base_files=buggy, fixed_files={gold.module: fixed[gold.module]},
        hidden_tests=tests, fail_to_pass=[ids[j] for j in failing],
        pass_to_pass=[t for j, t in enumerate(ids) if j not in failing], gold_file=gold.module,
        gold_function=f"{gold.module}::{gold.name}", mutation=kind, buggy_source=src, fixed_source=gold.source,
        problem_statement=statement, meta={"gold_layer": gold.layer, "n_files": len(buggy), "n_functions": len(funcs)},
    )
