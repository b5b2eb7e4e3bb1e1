"""Static validation of an LLM-written env module: it parses, stays small, imports only the allow-list
and names none of the escape hatches (``open``, ``exec``, ``eval``, ``__import__``, dunder attributes).

Allowed modules hold other modules as plain attributes (``typing.sys``, ``dataclasses.builtins``,
``enum.sys``, ``collections._sys``) and the authoring module holds numpy, whose functions read and write
files. So beyond the import allow-list: a name bound by an import may only be read as ``module.attribute``
(never passed, returned or aliased whole), and that attribute may not be private or itself a module; from the
authoring module only its ``__all__`` is importable; private attributes are read on ``self``/``cls`` only;
attribute names that lead to the interpreter, the file system or processes (``sys``, ``os``, ``builtins``,
``modules``, ``f_globals``, ``tofile``, ...) are refused on any object; ``Env`` may not override the env's
machinery (``step``, ``reset``, ...) that puts a time limit on its own methods; and no handler catches
``BaseException`` (a bare ``except:`` would swallow that time limit).

This runs on the module's text only; nothing of it is executed here (the allowed standard modules and the
authoring module are imported to list what they hold).
"""

from __future__ import annotations

import ast
import importlib
import types
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
# attribute names refused on any object: ways to the interpreter, the file system or processes
FORBIDDEN_ATTRIBUTES = frozenset({
    "sys", "os", "builtins", "modules", "subprocess", "importlib", "io", "codecs", "socket", "shutil", "pathlib",
    "ctypes", "gc", "inspect", "types", "marshal", "pickle", "posix", "signal", "threading", "multiprocessing",
    "tempfile", "glob", "mmap", "fcntl", "select", "asyncio", "urllib", "http", "runpy", "pty", "resource",
    "zipfile", "tarfile", "shelve", "sqlite3", "linecache", "tokenize", "f_globals", "f_locals", "f_back",
    "f_builtins", "f_code", "gi_frame", "gi_code", "cr_frame", "ag_frame", "tb_frame", "tb_next",
    "get_type_hints", "ForwardRef", "tofile", "fromfile", "dump", "load", "loads_file", "memmap", "loadtxt",
    "savetxt", "genfromtxt", "fromregex", "save", "savez", "savez_compressed", "system", "popen", "environ",
    "getenv", "putenv", "unlink", "rmtree", "spawn", "fork", "execv", "execve", "kill",
})
# the methods an Env may define over CapabilityEnv's (everything else of the base class is its machinery)
OVERRIDABLE = frozenset({"__init__", "build_task", "verify", "oracle", "tools"})
CATCH_ALL = frozenset({"BaseException", "KeyboardInterrupt", "SystemExit", "GeneratorExit"})


def _module_attributes() -> dict[str, frozenset[str]]:
    """For each allowed module: its attribute names that hold a module (refused as ``module.attribute``)."""
    held: dict[str, frozenset[str]] = {}
    for name in ALLOWED_IMPORTS - {"__future__"}:
        module = importlib.import_module(name)
        held[name] = frozenset(a for a in dir(module) if isinstance(getattr(module, a, None), types.ModuleType))
    return held


def _authoring_exports() -> frozenset[str]:
    module = importlib.import_module(AUTHORING_MODULE)
    return frozenset(getattr(module, "__all__", ()))


def _base_methods() -> frozenset[str]:
    module = importlib.import_module(AUTHORING_MODULE)
    return frozenset(a for a in dir(module.CapabilityEnv) if callable(getattr(module.CapabilityEnv, a, None)))


@dataclass
class StaticReport:
    ok: bool
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "problems": self.problems}


def _module_of(node: ast.ImportFrom) -> str:
    return "." * node.level + (node.module or "")


def _catches_everything(kind: ast.expr | None) -> bool:
    if kind is None:
        return True
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(isinstance(n, ast.Name) and n.id in CATCH_ALL for n in names)


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
    held = _module_attributes()
    exports, base_methods = _authoring_exports(), _base_methods()
    module_names: dict[str, str] = {}  # name an import binds -> the module it holds
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            module_names.update({(a.asname or a.name).split(".")[0]: a.name for a in node.names})
    attribute_bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    problems.append(f"line {line}: import of {alias.name!r} is not allowed "
                                    f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
                elif alias.name == AUTHORING_MODULE:
                    problems.append(f"line {line}: import names from {AUTHORING_MODULE} "
                                    f"(from {AUTHORING_MODULE} import {', '.join(sorted(exports))})")
        elif isinstance(node, ast.ImportFrom):
            mod = _module_of(node)
            if mod not in ALLOWED_IMPORTS:
                problems.append(f"line {line}: import from {mod!r} is not allowed "
                                f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
            if any(a.name == "*" for a in node.names):
                problems.append(f"line {line}: star imports are not allowed")
            for alias in node.names:
                if mod == AUTHORING_MODULE and alias.name != "*" and alias.name not in exports:
                    problems.append(f"line {line}: {alias.name!r} is not part of the authoring API "
                                    f"({', '.join(sorted(exports))})")
                elif mod in held and (alias.name in held[mod] or alias.name.startswith("_")) and mod != "__future__":
                    problems.append(f"line {line}: importing {alias.name!r} from {mod!r} is not allowed "
                                    "(a module or a private name)")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            problems.append(f"line {line}: use of {node.id!r} is not allowed")
        elif isinstance(node, ast.Name) and node.id in module_names and id(node) not in attribute_bases:
            problems.append(f"line {line}: the module {node.id!r} may only be used as {node.id}.<attribute>")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
            problems.append(f"line {line}: access to dunder attribute {node.attr!r} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            problems.append(f"line {line}: private attribute {node.attr!r} may be read on self or cls only")
        elif isinstance(node, ast.Attribute) and (node.attr in FORBIDDEN_ATTRIBUTES or (
                isinstance(node.value, ast.Name) and node.attr in held.get(module_names.get(node.value.id, ""), ()))):
            problems.append(f"line {line}: access to attribute {node.attr!r} is not allowed (it leads to the "
                            "interpreter, files or processes, or is a module)")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            problems.append(f"line {line}: global/nonlocal statements are not allowed")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value \
                and any(w in node.value for w in ("__import__", "__builtins__", "__globals__", "__subclasses__",
                                                   "__class__", "__dict__", "__code__")):
            problems.append(f"line {line}: string naming an interpreter internal ({node.value[:40]!r}) "
                            "is not allowed")
        elif isinstance(node, ast.ExceptHandler) and _catches_everything(node.type):
            problems.append(f"line {line}: a handler that catches BaseException (or a bare except:) is not "
                            "allowed; catch Exception or narrower")
        elif isinstance(node, ast.ClassDef):
            env_class = env_class or node.name == "Env"
            subclass = any(isinstance(b, ast.Name) and b.id in ("CapabilityEnv", "Env") for b in node.bases)
            for item in node.body if subclass or node.name == "Env" else ():
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in base_methods \
                        and item.name not in OVERRIDABLE:
                    problems.append(f"line {item.lineno}: {node.name} may not override {item.name!r} (an Env "
                                    f"defines {', '.join(sorted(OVERRIDABLE - {'__init__'}))} and helpers)")
        elif isinstance(node, ast.AsyncFunctionDef):
            problems.append(f"line {line}: async functions are not allowed")
    if not env_class:
        problems.append("the module defines no class named Env (class Env(CapabilityEnv): ...)")
    return StaticReport(not problems, problems)
