"""Each key of a command's Hydra config with its default and its YAML comment (for ``trace-rl <cmd> --help``).

A small comment-aware reader of our config files: block mappings, one key per line, an inline comment
after `` #`` (outside quotes), full-line comments directly above a key, and comment-only lines that
continue a key's inline comment. The ``defaults:`` list pulls in each group's file under its group
name (``moe: default`` -> ``moe.*``); comments above a file's first key are its header; ``hydra:`` is
left out (Hydra's own ``--hydra-help`` covers it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
    for group, option in defaults:
        if group == "_self_" or not option or option in ("null", "???"):
            continue
        group_file = conf_dir / group / f"{option}.yaml"
        if not group_file.exists():
            continue
        text = group_file.read_text()
        if any("@package _global_" in line for line in text.splitlines()[:3]):
            keys.append(ConfKey(group, option, f"preset: overrides keys of other groups ({group_file.name})"))
            continue
        group_keys, _ = parse_commented_yaml(text, prefix=f"{group}.")
        options = ", ".join(sorted(p.stem for p in group_file.parent.glob("*.yaml")))
        keys.append(ConfKey(group, option, f"config group (options: {options})"))
        keys.extend(group_keys)
    return keys
