"""One strict builder for every config dataclass: plain data (a YAML/Hydra mapping) in, a typed instance out.

``build(GRPOConfig, {"lora": {"r": "abc"}}, "grpo")`` raises
``ConfigError("grpo.lora.r: expected int, got 'abc' (str)")``; an unknown key fails with its full path and
the closest known name. Supported field types: ``int`` (not ``bool``), ``float`` (ints are widened),
``bool``, ``str``, ``pathlib.Path`` (from ``str``), ``Any``, ``None``, ``Optional``/unions, ``Literal``,
``Enum``, ``list[T]``, ``tuple[T, ...]``, ``tuple[A, B]``, ``dict[K, V]``/``Mapping`` and nested dataclasses
(a mapping, or an instance as is). Values are never coerced from strings: ``"3"`` is not an int.

OmegaConf containers (``DictConfig``/``ListConfig``) are resolved to plain data first. Errors raised by a
dataclass's own ``__post_init__`` come back as :class:`ConfigError` prefixed with the dataclass's path.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, Union

T = TypeVar("T")

_MISSING = object()


class ConfigError(ValueError):
    """A config value that does not fit its dataclass: the message starts with the key's full path."""


def build(cls: type[T], data: Any, path: str = "") -> T:
    """An instance of dataclass ``cls`` from ``data`` (a mapping, an instance of ``cls`` or ``None`` for
    all defaults); :class:`ConfigError` naming the full key path on an unknown, missing or mistyped key."""
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"build() needs a dataclass type, got {cls!r}")
    return _dataclass(cls, _plain(data) if data is not None else {}, path or cls.__name__)


def field_names(cls: type) -> list[str]:
    """The keys ``build`` accepts for dataclass ``cls`` (its ``init`` fields, in order)."""
    return [f.name for f in dataclasses.fields(cls) if f.init]


def check_keys(keys: Iterable[Any], known: Sequence[str], path: str = "") -> None:
    """:class:`ConfigError` naming the first of ``keys`` that is not one of ``known``, by its full path under
    ``path``, with the closest known name: the check of every mapping :func:`build` reads, and of a command's
    top-level keys (``trace_train.commands._app``)."""
    unknown = [k for k in keys if k not in known]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        more = f" (and {len(unknown) - 1} more: {sorted(map(str, unknown[1:]))})" if len(unknown) > 1 else ""
        raise ConfigError(f"{_join(path, key)}: unknown key{hint}{more}; known keys: {', '.join(known)}")


def _plain(value: Any) -> Any:
    module = type(value).__module__
    if module.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _dataclass(cls: type, data: Any, path: str) -> Any:
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of {cls.__name__} fields, got {_describe(data)}")
    names = field_names(cls)
    check_keys(data, names, path)
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key_path = _join(path, f.name)
        if f.name in data:
            kwargs[f.name] = _value(hints.get(f.name, Any), data[f.name], key_path)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key_path}: missing required key ({_type_name(hints.get(f.name, Any))})")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(path) else f"{path}: {message}") from exc


def _value(tp: Any, value: Any, path: str) -> Any:
    value = _plain(value)
    if tp is Any or tp is object:
        return value
    if isinstance(tp, TypeVar):
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return _union(tp, args, value, path)
    if origin is typing.Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise ConfigError(f"{path}: expected one of {list(args)}, got {_describe(value)}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{path}: expected null, got {_describe(value)}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value, path)
    if origin in (list, Sequence, typing.Sequence) or tp in (list, Sequence):
        return _list(args[0] if args else Any, value, path, "list")
    if origin is tuple or tp is tuple:
        return _tuple(args, value, path)
    if origin in (set, frozenset) or tp in (set, frozenset):
        kind = origin or tp
        return kind(_list(args[0] if args else Any, value, path, kind.__name__))
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        key_tp, value_tp = args if args else (Any, Any)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {_describe(value)}")
        return {_value(key_tp, k, _join(path, k)): _value(value_tp, v, _join(path, k)) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(f"{path}: expected one of {[m.value for m in tp]}, got {_describe(value)}") from None
    return _scalar(tp, value, path)


def _scalar(tp: Any, value: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN passes every "x <= 0" check and fails deep inside a run
                raise ConfigError(f"{path}: expected a finite number, got {value!r}")
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and issubclass(tp, Path):
        if isinstance(value, (str, Path)):
            return tp(value)
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        return value  # an annotation the builder does not know (a Protocol, a callable): passed through
    raise ConfigError(f"{path}: expected {_type_name(tp)}, got {_describe(value)}")


def _union(tp: Any, args: tuple[Any, ...], value: Any, path: str) -> Any:
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(f"{path}: expected {_type_name(tp)}, got null")
    errors = []
    # exact scalar types first, so 1 stays an int in ``int | float`` and "x" a str in ``str | list[str]``
    ordered = sorted((a for a in args if a is not type(None)), key=lambda a: 0 if type(value) is a else 1)
    for member in ordered:
        try:
            return _value(member, value, path)
        except ConfigError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    raise ConfigError(f"{path}: expected {_type_name(tp)}, got {_describe(value)}")


def _list(item_tp: Any, value: Any, path: str, kind: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, set, frozenset)):
        raise ConfigError(f"{path}: expected a {kind}, got {_describe(value)}")
    return [_value(item_tp, item, f"{path}[{i}]") for i, item in enumerate(value)]


def _tuple(args: tuple[Any, ...], value: Any, path: str) -> tuple[Any, ...]:
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_list(args[0], value, path, "list"))
    items = _list(Any, value, path, "list")
    if not args:
        return tuple(items)
    if len(items) != len(args):
        raise ConfigError(f"{path}: expected {len(args)} items, got {len(items)}")
    return tuple(_value(a, item, f"{path}[{i}]") for i, (a, item) in enumerate(zip(args, items)))


__all__ = ["ConfigError", "build", "check_keys", "field_names"]
