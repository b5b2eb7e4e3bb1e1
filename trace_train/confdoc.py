"""Each key of a command's Hydra config with its default and its YAML comment (for ``trace-rl <cmd> --help``).

A small comment-aware reader of our config files: block mappings, one key per line, an inline comment
after `` #`` (outside quotes), full-line comments directly above a key, and comment-only lines that
continue a key's inline comment. The ``defaults:`` list pulls in each group's file under its group
name (``moe: default`` -> ``moe.*``); comments above a file's first key are its header; ``hydra:`` is
left out (Hydra's own ``--hydra-help`` covers it).

The defaults shown are those of the composed config (the command's file, its groups and its default preset, as
``trace-rl <cmd> --cfg job`` prints them), each key once: the text as written where a file writes that value,
else the composed value; the comment is the first one any file gives the key.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.\-]*)\s*:(?:\s+(?P<rest>.*))?$")
_ITEM = re.compile(r"^(?P<indent> *)-\s+(?P<rest>.*)$")


@dataclass
class ConfKey:
    """One documented config key: dotted name, default as written, comment."""

    key: str
    default: str
    comment: str


def split_comment(text: str) -> tuple[str, str]:
    """``value  # comment`` -> (value, comment); a ``#`` inside quotes or without a space before it stays."""
    quote: str | None = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def parse_commented_yaml(text: str, prefix: str = "") -> tuple[list[ConfKey], list[tuple[str, str]]]:
    """The documented keys of a YAML config and its ``defaults:`` entries as (group, option) pairs."""
    keys: list[ConfKey] = []
    defaults: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    pending: list[str] = []  # full-line comments waiting for the next key
    last: tuple[ConfKey, int] | None = None  # the last key with an inline comment, and its indent
    in_defaults = skip_indent = None
    for raw in text.splitlines():
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        if not stripped:
            pending, last = [], None
            continue
        if stripped.startswith("#"):
            body = stripped[1:].strip()
            if last is not None and indent > last[1]:
                last[0].comment = f"{last[0].comment} {body}".strip()
            elif not body.startswith("@package") and (keys or defaults or stack or in_defaults is not None):
                pending.append(body)  # comments above the first key are the file's header, not a key's doc
                last = None
            continue
        if skip_indent is not None:
            if indent > skip_indent:
                continue
            skip_indent = None
        item = _ITEM.match(raw)
        if item:
            if in_defaults is not None and indent >= in_defaults:
                value, _ = split_comment(item.group("rest"))
                if ":" in value:
                    group, _, option = value.partition(":")
                    defaults.append((group.strip(), option.strip()))
            pending = []
            continue
        match = _KEY.match(raw)
        if not match:
            pending, last = [], None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = match.group("key")
        value, comment = split_comment(match.group("rest") or "")
        in_defaults = None
        if not stack and key == "hydra":
            skip_indent, pending, last = indent, [], None
            continue
        if not stack and key == "defaults":
            in_defaults, pending, last = indent, [], None
            continue
        dotted = ".".join([*(k for _, k in stack), key])
        doc = comment or " ".join(pending)
        if value:
            entry = ConfKey(f"{prefix}{dotted}", value, doc)
            keys.append(entry)
            last = (entry, indent) if comment else None
        else:
            stack.append((indent, key))
            if doc:
                entry = ConfKey(f"{prefix}{dotted}", "", doc)
                keys.append(entry)
                last = (entry, indent) if comment else None
            else:
                last = None
        pending = []
    return keys, defaults


def command_keys(conf_dir: str | Path, config_name: str) -> list[ConfKey]:
    """The keys of ``conf/<config_name>.yaml`` plus those of its default groups (not ``@package _global_``)."""
    conf_dir = Path(conf_dir)
    path = conf_dir / f"{config_name}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no config {path}")
    keys, defaults = parse_commented_yaml(path.read_text())
    markers: set[str] = set()  # the group entries (``moe: default``), not config values
    written: list[ConfKey] = []  # keys the preset files write: their values and comments count too
    for group, option in defaults:
        if group == "_self_" or not option or option in ("null", "???"):
            continue
        group_file = conf_dir / group / f"{option}.yaml"
        if not group_file.exists():
            continue
        text = group_file.read_text()
        if any("@package _global_" in line for line in text.splitlines()[:3]):
            keys.append(ConfKey(group, option, f"preset: overrides keys of other groups ({group_file.name})"))
            markers.add(group)
            written.extend(parse_commented_yaml(text)[0])
            continue
        group_keys, _ = parse_commented_yaml(text, prefix=f"{group}.")
        options = ", ".join(sorted(p.stem for p in group_file.parent.glob("*.yaml")))
        keys.append(ConfKey(group, option, f"config group (options: {options})"))
        markers.add(group)
        keys.extend(group_keys)
    composed = composed_config(conf_dir, config_name)
    if composed is None:
        return keys
    return with_composed_defaults(keys, written, markers, composed)


def top_level_keys(conf_dir: str | Path, config_name: str) -> list[str]:
    """The top-level keys of a command's composed config: those ``conf/<config_name>.yaml`` sets (but ``defaults``
    and ``hydra``), then the config groups of its defaults list; a ``@package _global_`` group (``preset``) sets
    keys of the others and adds none."""
    import yaml

    conf_dir = Path(conf_dir)
    doc = yaml.safe_load((conf_dir / f"{config_name}.yaml").read_text(encoding="utf-8")) or {}
    keys = [str(k) for k in doc if k not in ("defaults", "hydra")]
    for entry in doc.get("defaults") or []:
        if not isinstance(entry, dict):
            continue  # _self_
        for group, option in entry.items():
            group = str(group).removeprefix("override ").removeprefix("optional ").strip()
            group, _, package = group.partition("@")
            group_file = conf_dir / group / f"{option}.yaml"
            header = group_file.read_text(encoding="utf-8").splitlines()[:3] if group_file.is_file() else []
            if package.startswith("_global_") or any("@package _global_" in line for line in header):
                continue
            key = (package or group).split("/")[0].split(".")[0]
            if key not in keys:
                keys.append(key)
    return keys


def composed_config(conf_dir: Path, config_name: str) -> dict[str, Any] | None:
    """The command's config as Hydra composes it with no overrides (unresolved); None if it cannot be composed."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    if GlobalHydra.instance().is_initialized():
        return None  # inside a running Hydra app: leave its state alone
    try:
        with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base=None):
            cfg = compose(config_name=config_name)
    except Exception as exc:  # noqa: BLE001  (help must print; fall back to the defaults as written)
        logger.debug("cannot compose %s: %s", config_name, exc)
        return None
    container = OmegaConf.to_container(cfg, resolve=False)
    return container if isinstance(container, dict) else None


_MISSING = object()


def _lookup(doc: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return _MISSING
        doc = doc[part]
    return doc


def render_value(value: Any) -> str:
    """A config value in YAML flow style (``null``, ``true``, ``[a, b]``, ``{k: v}``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {render_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if isinstance(value, str):
        return value if value else "''"
    return repr(value)


def _same(text: str, value: Any) -> bool:
    import yaml

    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return type(parsed) is type(value) and parsed == value


def with_composed_defaults(keys: list[ConfKey], written: list[ConfKey], markers: set[str],
                           composed: dict[str, Any]) -> list[ConfKey]:
    """Each key once (first position, first non-empty comment) with its composed default; then the composed leaves
    no file documents."""
    by_key: dict[str, list[ConfKey]] = {}
    for entry in [*keys, *written]:
        by_key.setdefault(entry.key, []).append(entry)
    out: list[ConfKey] = []
    seen: set[str] = set()
    for entry in keys:
        if entry.key in seen:
            continue
        seen.add(entry.key)
        entries = by_key[entry.key]
        comment = next((e.comment for e in entries if e.comment), "")
        value = _MISSING if entry.key in markers else _lookup(composed, entry.key)
        if value is _MISSING or (isinstance(value, dict) and not entry.default):
            out.append(ConfKey(entry.key, entry.default, comment))  # a group, or a mapping whose keys follow
            continue
        text = next((e.default for e in reversed(entries) if e.default and _same(e.default, value)), None)
        out.append(ConfKey(entry.key, text if text is not None else render_value(value), comment))
    shown = {e.key for e in out if e.default}

    def covered(dotted: str) -> bool:
        parts = dotted.split(".")
        return any(".".join(parts[:i]) in shown for i in range(1, len(parts) + 1))

    def leaves(doc: Any, prefix: str) -> None:
        for k, v in doc.items():
            dotted = f"{prefix}{k}"
            if dotted in markers or dotted == "hydra" or covered(dotted):
                continue
            if isinstance(v, dict) and v:
                leaves(v, f"{dotted}.")
            else:
                out.append(ConfKey(dotted, render_value(v), ""))
    leaves(composed, "")
    return out
