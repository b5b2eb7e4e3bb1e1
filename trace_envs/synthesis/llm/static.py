"""Static validation of an LLM-written env module: it parses, stays small, imports only the allow-list
and names none of the escape hatches (``open``, ``exec``, ``eval``, ``__import__``, dunder attributes).

This runs on the module's text only; nothing of it is executed here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

AUTHORING_MODULE = "trace_envs.synthesis.llm.authoring"
ALLOWED_IMPORTS = frozenset({
    AUTHORING_MODULE, "__future__", "math", "itertools", "functools", "collections", "dataclasses", "typing",
    "re", "json", "string", "copy", "statistics", "enum",
})
FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "help", "exit", "quit", "memoryview", "__builtins__", "__loader__",
    "__spec__", "__file__",
})
ALLOWED_DUNDERS = frozenset({"__init__", "__post_init__", "__name__"})


@dataclass
class StaticReport:
    ok: bool
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "problems": self.problems}


def _module_of(node: ast.ImportFrom) -> str:
    return "." * node.level + (node.module or "")


def check_source(source: str, max_bytes: int = 60_000, max_lines: int = 1500) -> StaticReport:
    """All the reasons ``source`` is refused (empty list: accepted)."""
    problems: list[str] = []
    size = len(source.encode("utf-8", "replace"))
    if size > max_bytes:
        problems.append(f"module too large: {size} bytes > {max_bytes}")
    n_lines = source.count("\n") + 1
    if n_lines > max_lines:
        problems.append(f"module too long: {n_lines} lines > {max_lines}")
    try:
        tree = ast.parse(source, filename="<generated env>")
    except SyntaxError as exc:
        problems.append(f"syntax error at line {exc.lineno}, column {exc.offset}: {exc.msg}"
                        + (f" in {exc.text.strip()!r}" if exc.text else ""))
        return StaticReport(False, problems)
    env_class = False
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    problems.append(f"line {line}: import of {alias.name!r} is not allowed "
                                    f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
        elif isinstance(node, ast.ImportFrom):
            mod = _module_of(node)
            if mod not in ALLOWED_IMPORTS:
                problems.append(f"line {line}: import from {mod!r} is not allowed "
                                f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
            if any(a.name == "*" for a in node.names):
                problems.append(f"line {line}: star imports are not allowed")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            problems.append(f"line {line}: use of {node.id!r} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
            problems.append(f"line {line}: access to dunder attribute {node.attr!r} is not allowed")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            problems.append(f"line {line}: global/nonlocal statements are not allowed")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value \
                and any(w in node.value for w in ("__import__", "__builtins__", "__globals__", "__subclasses__",
                                                   "__class__", "__dict__", "__code__")):
            problems.append(f"line {line}: string naming an interpreter internal ({node.value[:40]!r}) "
                            "is not allowed")
        elif isinstance(node, ast.ClassDef) and node.name == "Env":
            env_class = True
        elif isinstance(node, ast.AsyncFunctionDef):
            problems.append(f"line {line}: async functions are not allowed")
    if not env_class:
        problems.append("the module defines no class named Env (class Env(CapabilityEnv): ...)")
    return StaticReport(not problems, problems)
