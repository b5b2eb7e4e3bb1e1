"""Routing baselines: the task-level zero-shot classifier router, the oracle router, static merge.

* :class:`TaskLevelRouter` (paper v1): the *base* model reads a classification prompt listing each
  capability with a label plus an extra "no adapter" label, and the label whose string continuation
  gets the highest log-probability wins (top-1; the base label means slot 0).
* :class:`OracleRouter`: the capability label is known; maps it to its slot.
* :func:`static_merge`: one weighted combination of all adapters via peft ``add_weighted_adapter``.

:func:`composition_labels` gives a saved composition's capability labels for the task-level router:
descriptions come from ``route_descriptions.json`` beside ``compose.json`` (written by
:func:`save_route_descriptions`), from a ``description`` in ``compose.json``'s adapter records, or
from the caller.
"""

from __future__ import annotations

import json
import logging
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trace_moe.composed import COMPOSE_JSON

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = (
    "Pick the skill that best handles the request.\n"
    "{options}\n"
    "Request: {request}\n"
    "Answer:"
)

DESCRIPTIONS_FILE = "route_descriptions.json"  # beside compose.json: {adapter name: description}


@dataclass
class CapabilityLabel:
    """A capability as the classifier sees it: a name (= adapter name) and *when* to use it."""

    name: str
    description: str


@dataclass
class RouteDecision:
    """The chosen slot (0 = base), its label name, and every scored label's score (log-prob).

    ``similarities``: a retrieval router's best cosine similarity per retrieved capability (empty otherwise)."""

    slot: int
    label: str
    scores: dict[str, float]
    similarities: dict[str, float] = field(default_factory=dict)


def first_user_message(messages: Sequence[Mapping[str, Any]]) -> str:
    """The content of the first ``user`` message of an OpenAI-style message list."""
    for m in messages:
        if m.get("role") == "user":
            return str(m.get("content") or "")
    raise ValueError("no user message to route on")


class TaskLevelRouter:
    """Zero-shot classifier router: the base model scores each label string after a prompt.

    ``capabilities[i]`` is slot ``i + 1``; the extra base label (``base_description``) is slot 0.
    Labels are the letters A, B, … (the base label gets the letter after the last capability) unless
    ``label_strings`` (capabilities first, base last) is given. ``label_prefix`` is prepended to each
    label when it is appended to the prompt (a space suits BPE tokenizers).
    """

    def __init__(self, model: nn.Module, tokenizer: Any, capabilities: Sequence[CapabilityLabel],
                 base_description: str = "None of these: answer with the unmodified model.",
                 template: str = DEFAULT_TEMPLATE, label_strings: Sequence[str] | None = None,
                 label_prefix: str = " ") -> None:
        if not capabilities:
            raise ValueError("at least one capability label is required")
        self.model = model
        self.tokenizer = tokenizer
        self.capabilities = list(capabilities)
        self.base_description = base_description
        self.template = template
        n = len(capabilities) + 1
        if label_strings is None:
            if n > len(string.ascii_uppercase):
                raise ValueError(f"{n} labels exceed the letters A-Z; pass label_strings")
            label_strings = list(string.ascii_uppercase[:n])
        if len(label_strings) != n or len(set(label_strings)) != n:
            raise ValueError(f"need {n} distinct label strings (capabilities then base), got {list(label_strings)}")
        self.label_strings = list(label_strings)
        self.label_prefix = label_prefix

    @property
    def names(self) -> list[str]:
        """Label names in slot order: ``['base', capability names...]``."""
        return ["base"] + [c.name for c in self.capabilities]

    def _listed(self, candidates: Sequence[str] | None) -> list[tuple[str, CapabilityLabel]]:
        """``(label string, capability)`` in listing order: every capability, or only ``candidates`` in their
        order, lettered from the first label string; the base label keeps the last string."""
        by_name = {c.name: c for c in self.capabilities}
        if candidates is None:
            chosen = self.capabilities
        else:
            unknown = [c for c in candidates if c not in by_name]
            if unknown or not candidates or len(set(candidates)) != len(candidates):
                raise ValueError(f"candidates must be distinct capability names of {list(by_name)}, "
                                 f"got {list(candidates)}")
            chosen = [by_name[c] for c in candidates]
        return list(zip(self.label_strings, chosen))

    def prompt(self, request: str, candidates: Sequence[str] | None = None,
               examples: Mapping[str, str] | None = None) -> str:
        """The classification prompt; ``candidates`` lists only those capabilities (in that order) and
        ``examples`` adds a request each of them solved (retrieval-augmented classification)."""
        examples = examples or {}
        lines = []
        for lab, cap in self._listed(candidates):
            example = f" Example: {examples[cap.name]}" if cap.name in examples else ""
            lines.append(f"{lab}: {cap.description}{example}")
        lines.append(f"{self.label_strings[-1]}: {self.base_description}")
        return self.template.format(options="\n".join(lines), request=request)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @torch.no_grad()
    def scores(self, request: str, candidates: Sequence[str] | None = None,
               examples: Mapping[str, str] | None = None) -> dict[str, float]:
        """Sum of log-probs of each listed label's tokens after the prompt, keyed by name (base first, then the
        listed capabilities in listing order)."""
        prompt_ids = self._encode(self.prompt(request, candidates, examples))
        listed = self._listed(candidates)
        names = ["base"] + [cap.name for _, cap in listed]
        label_ids = [self._encode(self.label_prefix + s) for s in [self.label_strings[-1]] + [lab for lab, _ in listed]]
        if any(not ids for ids in label_ids):
            raise ValueError("a label string encodes to no tokens")
        ctx = _base_only(self.model)
        with ctx:
            device = next(self.model.parameters()).device
            seqs = [prompt_ids + ids for ids in label_ids]
            width = max(len(s) for s in seqs)
            batch = torch.zeros((len(seqs), width), dtype=torch.long)
            att = torch.zeros_like(batch)
            for i, s in enumerate(seqs):
                batch[i, : len(s)] = torch.tensor(s)
                att[i, : len(s)] = 1
            logits = self.model(input_ids=batch.to(device), attention_mask=att.to(device), use_cache=False).logits
            logp = logits.float().log_softmax(-1)
        out: dict[str, float] = {}
        p = len(prompt_ids)
        for name, ids, row in zip(names, label_ids, logp):
            out[name] = float(sum(row[p - 1 + j, tok] for j, tok in enumerate(ids)))
        return out

    def route(self, request: str | Sequence[Mapping[str, Any]], candidates: Sequence[str] | None = None,
              examples: Mapping[str, str] | None = None) -> RouteDecision:
        """Top-1 label for a request text (or a message list: its first user message), among ``candidates``
        and the base label when given."""
        text = request if isinstance(request, str) else first_user_message(request)
        scores = self.scores(text, candidates, examples)
        best = max(scores, key=scores.get)
        return RouteDecision(slot=self.names.index(best), label=best, scores=scores)

    def probabilities(self, scores: Mapping[str, float], temperature: float = 1.0) -> dict[str, float]:
        """Softmax of the label scores (alpha_c in the paper) at a given temperature."""
        m = max(scores.values())
        exp = {k: math.exp((v - m) / temperature) for k, v in scores.items()}
        z = sum(exp.values())
        return {k: v / z for k, v in exp.items()}


def single_token_labels(tokenizer: Any, n: int, prefix: str = " ") -> list[str] | None:
    """The first ``n`` of the letters A-Z, then the digits, that ``prefix + label`` encodes to ONE token each.

    A label of two tokens pays a second log-prob, so with a small BPE vocabulary letter labels are not
    scored on an equal footing; ``None`` when fewer than ``n`` single-token labels exist.
    """
    found = [c for c in string.ascii_uppercase + string.digits
             if len(tokenizer(prefix + c, add_special_tokens=False)["input_ids"]) == 1]
    return found[:n] if len(found) >= n else None


def save_route_descriptions(composed_dir: str | Path, descriptions: Mapping[str, str]) -> Path:
    """Write ``{adapter name: description}`` beside a saved composition's ``compose.json`` (atomic).

    Every name must be one of the composition's adapters; an existing file is not overwritten.
    """
    from trace_envs.records import write_json_atomic

    composed_dir = Path(composed_dir)
    names = _composition_names(composed_dir)
    unknown = sorted(set(descriptions) - set(names))
    if unknown:
        raise ValueError(f"{composed_dir}: no adapter named {unknown}; the composition has {names}")
    out = composed_dir / DESCRIPTIONS_FILE
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it to write new descriptions")
    return write_json_atomic(out, {name: str(descriptions[name]) for name in names if name in descriptions})


def composition_labels(composed_dir: str | Path,
                       descriptions: Mapping[str, str] | None = None) -> list[CapabilityLabel]:
    """The labels (slot order, base excluded) of a saved composition's adapters.

    A description comes from ``descriptions`` (the caller's, which win), else ``route_descriptions.json``,
    else the adapter's ``description`` in ``compose.json``; ``ValueError`` names the adapters left without one
    and any name in ``descriptions`` that is not an adapter.
    """
    composed_dir = Path(composed_dir)
    meta = _compose_meta(composed_dir)
    names = [str(r["name"]) for r in meta["adapters"]]
    given = dict(descriptions or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"route descriptions for {unknown}, but the composition {composed_dir} has adapters {names}")
    saved: dict[str, str] = {}
    sidecar = composed_dir / DESCRIPTIONS_FILE
    if sidecar.is_file():
        doc = json.loads(sidecar.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise ValueError(f"{sidecar}: expected a JSON object {{adapter name: description}}")
        saved = doc
    recorded = {str(r["name"]): r["description"] for r in meta["adapters"] if isinstance(r.get("description"), str)}
    labels, missing = [], []
    for name in names:
        text = given.get(name) or saved.get(name) or recorded.get(name) or ""
        if not text.strip():
            missing.append(name)
        labels.append(CapabilityLabel(name=name, description=text.strip()))
    if missing:
        raise ValueError(f"no description for adapter(s) {missing} of {composed_dir}: pass route_descriptions="
                         f"{{name: description}} or write {DESCRIPTIONS_FILE} with save_route_descriptions")
    return labels


def _compose_meta(composed_dir: Path) -> dict[str, Any]:
    path = composed_dir / COMPOSE_JSON
    if not path.is_file():
        raise ValueError(f"{composed_dir}: no {COMPOSE_JSON}; not a directory written by trace-rl compose "
                         f"(ComposedModel.save)")
    meta = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(meta.get("adapters"), list) or not meta["adapters"]:
        raise ValueError(f"{path}: lists no adapters")
    return meta


def _composition_names(composed_dir: Path) -> list[str]:
    return [str(r["name"]) for r in _compose_meta(composed_dir)["adapters"]]


class _base_only:
    """Context: if ``model`` is a ComposedModel, force slot 0 so the classifier is the base model."""

    def __init__(self, model: nn.Module) -> None:
        self._ctx = model.forcing(0) if hasattr(model, "forcing") else None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


class OracleRouter:
    """The router that is told the capability: maps a label (name or slot) to its slot."""

    def __init__(self, slot_names: Sequence[str]) -> None:
        self.slot_names = list(slot_names)

    def route(self, capability: str | int | None) -> RouteDecision:
        if capability is None or capability in ("base", "none", ""):
            slot = 0
        elif isinstance(capability, int):
            if not 0 <= capability < len(self.slot_names):
                raise ValueError(f"slot {capability} out of range for {self.slot_names}")
            slot = capability
        elif capability in self.slot_names:
            slot = self.slot_names.index(capability)
        else:
            raise ValueError(f"unknown capability {capability!r}; slots are {self.slot_names}")
        return RouteDecision(slot=slot, label=self.slot_names[slot], scores={self.slot_names[slot]: 0.0})

    def forcing(self, composed: Any, capability: str | int | None):
        """Context manager: route every token of ``composed`` to the capability's adapter."""
        return composed.forcing(self.route(capability).slot)


def static_merge(base_model: nn.Module, adapter_dirs: Sequence[str | Path], weights: Sequence[float] | None = None,
                 names: Sequence[str] | None = None, combination_type: str = "cat",
                 merged_name: str = "merged") -> nn.Module:
    """A peft model whose active adapter is the weighted combination of all adapters.

    ``combination_type='cat'`` is exact: delta W = sum_c w_c scale_c B_c A_c. ``weights`` default to
    uniform 1/N. Returns the ``PeftModel`` with ``merged_name`` active.
    """
    from peft import PeftModel

    from trace_moe.adapters import default_adapter_name, load_adapters

    load_adapters(adapter_dirs, names)  # same compatibility checks as the composer
    names = list(names) if names is not None else [default_adapter_name(p) for p in adapter_dirs]
    weights = list(weights) if weights is not None else [1.0 / len(adapter_dirs)] * len(adapter_dirs)
    if len(weights) != len(names):
        raise ValueError(f"{len(weights)} weights for {len(names)} adapters")
    model = PeftModel.from_pretrained(base_model, str(adapter_dirs[0]), adapter_name=names[0])
    for path, name in zip(adapter_dirs[1:], names[1:]):
        model.load_adapter(str(path), adapter_name=name)
    model.add_weighted_adapter(names, weights, merged_name, combination_type=combination_type)
    model.set_adapter(merged_name)
    return model.eval()
