"""An LLM-written SWE scenario (the SWE flavour of the env generator) and its static checks.

A scenario is one JSON object (in a fenced ```json block of the LLM's answer)::

    {"name": "bulk_discount",                       # a slug
     "problem_statement": "PR-style description of the bug ...",
     "files": {"shop/pricing.py": "...", "tests/test_pricing.py": "..."},   # the base tree: module + its tests
     "target_tests": {"tests/test_target.py": "..."},  # hidden: added at evaluation only
     "fail_to_pass": ["tests/test_target.py::test_threshold"],
     "oracle_files": {"shop/pricing.py": "..."}}      # the full fixed text of every file the oracle patch changes

Static checks (nothing runs): the shape above, every path relative and plain (no absolute path, no ``..``,
no hidden or ``.git`` component, no backslash, only ``[A-Za-z0-9_.-]`` names, at most 4 deep), allowed file
types, no pytest configuration (``conftest.py``, ``pytest.ini``, ...: they would change how the grader
sees the tests), size limits, every Python file parses and imports only the allow-list (pure stdlib,
``pytest`` and the scenario's own packages) and names none of the escape hatches of ``static.py``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from trace_envs.swe.patches import is_test_path
from trace_envs.synthesis.llm.fenced import longest_fenced_block
from trace_envs.synthesis.llm.static import ALLOWED_DUNDERS, FORBIDDEN_NAMES

SWE_DOMAINS = ("swe", "swebench")
SWE_ENV_MARKERS = ("swebench", "code_localization")
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_]{0,39}$")
ALLOWED_SUFFIXES = (".py", ".md", ".txt", ".json")
FORBIDDEN_FILES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "setup.py",
                             "sitecustomize.py", "usercustomize.py"})
SWE_ALLOWED_IMPORTS = frozenset({
    "__future__", "math", "itertools", "functools", "collections", "dataclasses", "typing", "re", "json", "string",
    "copy", "statistics", "enum", "decimal", "fractions", "datetime", "operator", "heapq", "bisect", "textwrap",
    "abc", "numbers", "pytest", "collections.abc", "unittest",
})
MAX_FILES, MAX_FILE_CHARS, MAX_TOTAL_CHARS, MAX_DEPTH = 20, 20_000, 100_000, 4
KEYS = ("name", "problem_statement", "files", "target_tests", "fail_to_pass", "oracle_files")


def is_swe_target(domain: str | None, target_env: str | None = None) -> bool:
    """A SWE target: ``synthesis.domain`` is ``swe`` or the target env is one of ``trace_envs/swe``'s ids."""
    return (domain or "") in SWE_DOMAINS or any(m in (target_env or "") for m in SWE_ENV_MARKERS)


@dataclass
class SWEScenario:
    name: str
    problem_statement: str
    files: dict[str, str]
    target_tests: dict[str, str]
    fail_to_pass: list[str]
    oracle_files: dict[str, str]

    def visible_tests(self) -> list[str]:
        return sorted(p for p in self.files if is_test_path(p) and p.endswith(".py"))

    def fixed_files(self) -> dict[str, str]:
        """The files the oracle patch changes, with their fixed text."""
        return {p: t for p, t in self.oracle_files.items() if self.files.get(p) != t}

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KEYS}


@dataclass
class ScenarioCheck:
    ok: bool
    problems: list[str] = field(default_factory=list)
    scenario: SWEScenario | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems}


def extract_json(answer: str) -> dict[str, Any]:
    """The (longest) fenced ```json block of ``answer`` as an object; ``ValueError`` when there is none."""
    block = longest_fenced_block(answer, ("json", ""))
    if block is None:
        raise ValueError("the answer holds no fenced ```json block")
    try:
        doc = json.loads(block)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the ```json block is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("the ```json block must hold one JSON object")
    return doc


def path_problems(path: Any) -> list[str]:
    """Why ``path`` is not a plain relative file path inside the scenario's repository (empty: fine)."""
    if not isinstance(path, str) or not path:
        return [f"file path {path!r} must be a non-empty string"]
    if path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        return [f"file path {path!r} is absolute; use paths relative to the repository root"]
    if "\\" in path or "\x00" in path:
        return [f"file path {path!r} holds a backslash or NUL"]
    parts = path.split("/")
    if ".." in parts:
        return [f"file path {path!r} escapes the repository ('..')"]
    bad = [p for p in parts if not _PART.match(p)]
    if bad:
        return [f"file path {path!r}: component {bad[0]!r} is not a plain name ([A-Za-z0-9_.-], no leading dot)"]
    if len(parts) > MAX_DEPTH:
        return [f"file path {path!r} is more than {MAX_DEPTH} levels deep"]
    if parts[-1] in FORBIDDEN_FILES:
        return [f"file {path!r} is not allowed (no pytest configuration or packaging files)"]
    if PurePosixPath(path).suffix not in ALLOWED_SUFFIXES:
        return [f"file {path!r}: only {', '.join(ALLOWED_SUFFIXES)} files are allowed"]
    return []


def _python_problems(path: str, text: str, own: set[str]) -> list[str]:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return [f"{path}: syntax error at line {exc.lineno}: {exc.msg}"]
    out = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                [("." * node.level) + (node.module or "")] if isinstance(node, ast.ImportFrom) else [])
        for mod in mods:
            if mod not in SWE_ALLOWED_IMPORTS and mod.split(".")[0] not in own and not mod.startswith("."):
                out.append(f"{path} line {line}: import of {mod!r} is not allowed (allowed: the scenario's own "
                           f"packages, {', '.join(sorted(SWE_ALLOWED_IMPORTS))})")
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            out.append(f"{path} line {line}: use of {node.id!r} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
            out.append(f"{path} line {line}: access to dunder attribute {node.attr!r} is not allowed")
    return out


def _typed(doc: dict[str, Any]) -> list[str]:
    out = [f"missing key {k!r}" for k in KEYS if k not in doc]
    out += [f"unknown key {k!r} (keys: {', '.join(KEYS)})" for k in doc if k not in KEYS]
    for key in ("name", "problem_statement"):
        if key in doc and not (isinstance(doc[key], str) and doc[key].strip()):
            out.append(f"{key!r} must be a non-empty string")
    for key in ("files", "target_tests", "oracle_files"):
        if key in doc and not (isinstance(doc[key], dict) and doc[key]
                               and all(isinstance(v, str) for v in doc[key].values())):
            out.append(f"{key!r} must be a non-empty object of path -> file text")
    if "fail_to_pass" in doc and not (isinstance(doc["fail_to_pass"], list) and doc["fail_to_pass"]
                                      and all(isinstance(t, str) for t in doc["fail_to_pass"])):
        out.append("'fail_to_pass' must be a non-empty list of pytest node ids")
    return out


def check_scenario(doc: dict[str, Any]) -> ScenarioCheck:
    """All the reasons the scenario ``doc`` is refused (none: ``ok`` with the parsed ``scenario``)."""
    problems = _typed(doc)
    if problems:
        return ScenarioCheck(False, problems)
    sc = SWEScenario(doc["name"], doc["problem_statement"], dict(doc["files"]), dict(doc["target_tests"]),
                     list(doc["fail_to_pass"]), dict(doc["oracle_files"]))
    if not _SLUG.match(sc.name):
        problems.append(f"name {sc.name!r} must be a lowercase slug ([a-z0-9_], at most 40 characters)")
    every = {**sc.files, **sc.target_tests, **sc.oracle_files}
    paths = list(dict.fromkeys([*sc.files, *sc.target_tests, *sc.oracle_files]))
    for path in paths:
        problems += path_problems(path)
    problems += [f"{path!r} is a file and also a directory of {other!r}" for path in paths for other in paths
                 if other.startswith(path + "/")][:5]
    tops = {p.split("/")[0].removesuffix(".py") for p in paths}
    problems += [f"{name!r} (a file or package of the scenario) shadows the standard module of that name"
                 for name in sorted(tops & set(sys.stdlib_module_names))]
    if problems:
        return ScenarioCheck(False, problems)
    if len(set(sc.files) | set(sc.target_tests) | set(sc.oracle_files)) > MAX_FILES:
        problems.append(f"more than {MAX_FILES} files")
    total = sum(len(t) for t in [*sc.files.values(), *sc.target_tests.values(), *sc.oracle_files.values()])
    if total > MAX_TOTAL_CHARS:
        problems.append(f"the files hold {total} characters in all (at most {MAX_TOTAL_CHARS})")
    problems += [f"{p}: {len(t)} characters (at most {MAX_FILE_CHARS})" for p, t in every.items()
                 if len(t) > MAX_FILE_CHARS]
    source = [p for p in sc.files if p.endswith(".py") and not is_test_path(p)]
    if not source:
        problems.append("'files' holds no module (a non-test .py file)")
    if not sc.visible_tests():
        problems.append("'files' holds no tests of the module (tests/test_*.py) that pass before and after the fix")
    for path in sc.target_tests:
        if not is_test_path(path) or not path.endswith(".py"):
            problems.append(f"target test {path!r} must be a test file (tests/test_*.py)")
        if path in sc.files:
            problems.append(f"target test {path!r} is also in 'files'; give the hidden target test its own file")
    for path in sc.oracle_files:
        if is_test_path(path):
            problems.append(f"the oracle patch changes test file {path!r}; it may change only non-test files")
    if not sc.fixed_files():
        problems.append("the oracle patch changes nothing: 'oracle_files' equals the base files")
    for node in sc.fail_to_pass:
        if node.split("::")[0] not in sc.target_tests or "::" not in node:
            problems.append(f"fail_to_pass id {node!r} must name a test of a target test file "
                            "(<target test path>::<test name>)")
    own = {p.split("/")[0].removesuffix(".py") for p in every}
    # every text that runs: the base files, the hidden tests and the fixed files (a base file the oracle changes
    # is still what the tests run before the fix)
    for texts in (sc.files, sc.target_tests, sc.oracle_files):
        for path, text in texts.items():
            if path.endswith(".py"):
                problems += _python_problems(path, text, own)
    problems = list(dict.fromkeys(problems))  # a base file and its fixed version may share a finding
    return ScenarioCheck(not problems, problems, sc if not problems else None)
