"""Static validation of an LLM-written env module: it parses, stays small, imports only the allow-list
and names none of the escape hatches (``open``, ``exec``, ``eval``, ``__import__``, dunder attributes).

Allowed modules hold other modules as plain attributes (``typing.sys``, ``dataclasses.builtins``,
``enum.sys``, ``collections._sys``) and the authoring module holds numpy, whose functions read and write
files. So beyond the import allow-list: a name bound by an import may only be read as ``module.attribute``
(never passed, returned or aliased whole), and that attribute may not be private or itself a module; from the
authoring module only its ``__all__`` is importable; private attributes are read on ``self``/``cls`` only;
attribute names that lead to the interpreter, the file system or processes (``sys``, ``os``, ``builtins``,
``modules``, ``f_globals``, ``tofile``, ...) are refused on any object; ``Env`` may not override (nor any code
assign) the env's machinery (``step``, ``reset``, ...) that puts a time limit on its own methods; and no handler catches
``BaseException`` (a bare ``except:`` would swallow that time limit).

The allowed modules also turn a string built at run time into an attribute read, an ``eval`` or a ``setattr``,
which no check of names can see; those routes are refused by name: ``string.Formatter`` (``get_field``,
``vformat``: an attribute read), ``functools.update_wrapper``/``wraps`` (``assigned=``: an attribute read),
``functools.singledispatch`` (``register`` evaluates string annotations), enum's sunder machinery
(``cls._convert_`` reads any loaded module's globals) and ``enum.global_enum`` (writes into a loaded module),
a class built from a run-time dict (``type``, the metaclasses the allowed modules hold, ``metaclass=``,
enum's functional API: enum's classes serve as bases only and an enum class defines members;
``dataclasses.make_dataclass``): its keys could name ``__annotations__``, which ``dataclass`` compiles into
code, or a copy hook; so ``dataclass`` only decorates a class statement. Nor may a module define dunders outside
``DEFINABLE_DUNDERS`` (``__reduce_ex__`` makes ``copy``, and the host's own ``deepcopy`` of the db, call
``setattr`` with names from the module; ``__exit__`` could swallow the time limit; ``__init_subclass__``
and ``__set_name__`` run at class creation). ``str.format`` with a run-time field name reads attributes too,
but returns text only; ``re``/``json`` callbacks and ``functools.reduce`` call only what the module holds.

This check is one layer, not a sandbox: it reads the text against a list of known routes, and Python has
more routes than any such list. The others: ``validate.py`` runs the module first only in a confined
subprocess (``sandbox.py``: namespaces, a filesystem jail, resource limits, no network where the kernel
allows; ``probe.py`` plays it there); the emitted manifest pins the validated text's sha256, and
``loader.py`` refuses a file that differs or no longer passes this check, runs exactly the text it checked
and puts a time limit on its import and on every authored method. After emission (calibration, training,
``gym.make`` of an emitted id) the module runs only in a persistent confined worker subprocess (``worker.py``,
with the probe's confinement) behind a host-side proxy (``confined_env.py``) that exchanges checked JSON with
it; the host never imports it. So a module that behaves in the jail and finds a route this list misses runs
code in the worker's sandbox, not in the host, unless the sandbox itself is escaped (it is not hardened
against kernel exploits) or the machine lacks a confinement (each missing one is logged as a warning).
``gym.make(env_id, confined=False)``, a debugging opt-out, imports it in the host with the host's full rights
again. Treat an LLM-written env as code to review before it trains on a machine that matters.

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
# dunders a module may define (as a method or a class attribute) or name: ordinary protocols only. Not the copy
# and pickle hooks (``copy._reconstruct`` calls setattr with the names they return), not class-creation hooks,
# attribute hooks, descriptors, ``__del__`` (runs outside any time limit) or ``__exit__`` (returning True would
# swallow the time limit's exception)
DEFINABLE_DUNDERS = frozenset({
    "__init__", "__post_init__", "__name__", "__doc__", "__slots__", "__all__", "__match_args__", "__repr__",
    "__str__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__",
    "__iter__", "__next__", "__reversed__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
    "__missing__", "__call__", "__int__", "__float__", "__index__", "__round__", "__neg__", "__pos__",
    "__abs__", "__invert__",
} | {f"__{p}{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
                                "lshift", "rshift", "matmul", "divmod") for p in ("", "r", "i")} - {"__idivmod__"})
# names (imported or read as an attribute) of the allowed modules' routes from a run-time string to an attribute
# read, an eval, a setattr or a write into a loaded module; see the module docstring
FORBIDDEN_ROUTES = frozenset({
    "Formatter", "get_field", "vformat", "get_value", "format_field", "convert_field",  # string
    "update_wrapper", "wraps", "WRAPPER_ASSIGNMENTS", "WRAPPER_UPDATES",  # functools: assigned=(name, ...)
    "singledispatch", "singledispatchmethod",  # functools: register() evaluates string annotations
    "global_enum", "EnumType", "EnumMeta", "make_dataclass",  # enum, dataclasses
})

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


def _metaclasses() -> frozenset[str]:
    """The allowed modules' attribute names that hold a metaclass (``typing.ABCMeta``, ``enum.EnumType``): a
    call of one builds a class from a run-time dict."""
    found: set[str] = set()
    for name in ALLOWED_IMPORTS - {"__future__"}:
        module = importlib.import_module(name)
        found.update(a for a in dir(module)
                     if isinstance(getattr(module, a, None), type) and issubclass(getattr(module, a), type))
    return frozenset(found)


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_sunder(name: str) -> bool:
    return len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_" and name[-2] != "_"


def _enum_classes() -> frozenset[str]:
    """The enum module's enum classes (``Enum``, ``IntEnum``, ``Flag``, ...): member-less, so their functional API
    (``Enum(name, names)``) builds a class from a run-time dict."""
    import enum

    return frozenset(a for a in dir(enum) if isinstance(getattr(enum, a), type) and issubclass(getattr(enum, a),
                                                                                               enum.Enum))


def _enum_problems(tree: ast.AST, module_names: dict[str, str]) -> list[str]:
    """The enum module's classes serve as bases only, and an enum class of the module defines members (a
    member-less one, passed around, would still offer the functional API)."""
    stdlib = _enum_classes()
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "enum"
                for a in n.names if a.name in stdlib}

    def names_stdlib(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in imported) or (
            isinstance(node, ast.Attribute) and node.attr in stdlib and isinstance(node.value, ast.Name)
            and module_names.get(node.value.id) == "enum")

    problems: list[str] = []
    bases = {id(b) for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for b in n.bases}
    enums = set(imported)
    for node in ast.walk(tree):
        if names_stdlib(node) and id(node) not in bases:
            problems.append(f"line {node.lineno}: enum's classes may only be base classes (class C(Enum): ...); "
                            "the functional API Enum(name, names) is not allowed")
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if any(names_stdlib(b) or (isinstance(b, ast.Name) and b.id in enums) for b in node.bases):
            enums.add(node.name)
            members = [t for item in node.body if isinstance(item, (ast.Assign, ast.AnnAssign))
                       for t in (item.targets if isinstance(item, ast.Assign) else [item.target])
                       if isinstance(t, ast.Name) and not t.id.startswith("_")]
            if not members:
                problems.append(f"line {node.lineno}: the enum class {node.name!r} defines no members (shared enum "
                                "behaviour goes in a plain mixin class)")
    return problems


def _route_problems(tree: ast.AST, module_names: dict[str, str]) -> list[str]:
    """Routes from a run-time string to an attribute read, an eval or a setattr (see the module docstring)."""
    problems: list[str] = _enum_problems(tree, module_names)
    metaclasses = _metaclasses()
    decorators = {id(d) for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for d in n.decorator_list}
    decorators |= {id(d.func) for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for d in n.decorator_list
                   if isinstance(d, ast.Call)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        named = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                 else None)
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in FORBIDDEN_ROUTES or alias.name in metaclasses:
                    problems.append(f"line {line}: importing {alias.name!r} is not allowed (it turns a run-time "
                                    "string into an attribute read, an eval or a class)")
                if alias.asname and _is_dunder(alias.asname):
                    problems.append(f"line {line}: binding the dunder name {alias.asname!r} is not allowed")
        elif isinstance(node, ast.Attribute) and (node.attr in FORBIDDEN_ROUTES or node.attr in metaclasses):
            problems.append(f"line {line}: {node.attr!r} is not allowed (it turns a run-time string into an "
                            "attribute read, an eval or a class)")
        elif isinstance(node, ast.Attribute) and _is_sunder(node.attr):
            problems.append(f"line {line}: the sunder attribute {node.attr!r} (enum machinery) is not allowed")
        elif isinstance(node, ast.Name) and node.id == "type":
            problems.append(f"line {line}: 'type' is not allowed (type(name, bases, dict) and a metaclass call "
                            "build a class from a run-time dict); write isinstance(x, C) to test a type")
        if named == "dataclass" and id(node) not in decorators:
            problems.append(f"line {line}: dataclass may only decorate a class statement (@dataclass)")
        if isinstance(node, ast.Name) and _is_dunder(node.id) and node.id not in DEFINABLE_DUNDERS \
                and node.id not in FORBIDDEN_NAMES:
            problems.append(f"line {line}: the dunder name {node.id!r} is not allowed (only ordinary protocol "
                            "dunders: __repr__, __eq__, __lt__, __hash__, __len__, __iter__, __getitem__, arithmetic, "
                            "...)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _is_dunder(node.name) \
                and node.name not in DEFINABLE_DUNDERS:
            problems.append(f"line {line}: defining {node.name!r} is not allowed (copy, pickle, class-creation, "
                            "attribute and context-manager hooks are refused)")
        if isinstance(node, ast.ClassDef) and node.keywords:
            problems.append(f"line {line}: class keywords ({', '.join(k.arg or '**' for k in node.keywords)}) "
                            "are not allowed (metaclass= builds the class from a run-time dict)")
    return problems


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
    problems.extend(_route_problems(tree, module_names))
    machinery = base_methods - OVERRIDABLE
    problems.extend(f"line {n.lineno}: assigning {n.attr!r} is not allowed (the env's machinery, which puts a "
                    "time limit on its methods)" for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)) and n.attr in machinery)
    if not env_class:
        problems.append("the module defines no class named Env (class Env(CapabilityEnv): ...)")
    return StaticReport(not problems, problems)
