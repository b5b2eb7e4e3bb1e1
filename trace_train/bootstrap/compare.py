"""Is a bootstrapped model the same as another (the shipped base)? Tensor by tensor, plus the tokenizer."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file


@dataclass(frozen=True)
class ModelComparison:
    """How two saved policies differ: the tensors whose values differ and the largest absolute difference."""

    tensors: int
    differing: tuple[str, ...]
    missing: tuple[str, ...]  # names present in only one of the two
    reshaped: tuple[str, ...]  # differing tensors whose shape or dtype differs (no |diff| exists for them)
    max_abs_diff: float
    tokenizer_identical: bool

    @property
    def identical(self) -> bool:
        return not self.differing and not self.missing and self.tokenizer_identical

    def summary(self) -> str:
        if self.identical:
            return f"bit for bit identical ({self.tensors} tensors, same tokenizer)"
        valued = len(self.differing) - len(self.reshaped)
        detail = [f"max |diff| {self.max_abs_diff:.3g}"] if valued else []
        if self.reshaped:
            detail.append(f"{len(self.reshaped)} in shape or dtype")
        parts = [f"{len(self.differing)} of {self.tensors} tensors differ ({', '.join(detail)})"]
        if self.missing:
            parts.append(f"{len(self.missing)} tensors in only one model ({', '.join(self.missing[:3])})")
        if not self.tokenizer_identical:
            parts.append("the tokenizers differ")
        return "; ".join(parts)


def made_from(model_dir: str | Path) -> str | None:
    """The bootstrap config hash recorded in ``model_dir/bootstrap.json`` (None when there is none)."""
    meta = Path(model_dir) / "bootstrap.json"
    return json.loads(meta.read_text()).get("config_hash") if meta.is_file() else None


def _tokenizer(model_dir: Path) -> object:
    return json.loads((model_dir / "tokenizer.json").read_text())


FINGERPRINT_PATTERN = re.compile(r"[0-9a-f]{64}")


def model_fingerprint(model_dir: str | Path) -> str:
    """sha256 over a saved policy's tensors (name, dtype, shape, bytes, in name order) and its tokenizer (canonical
    JSON): equal exactly when :func:`compare_models` finds the two identical, and independent of the file layout, so
    a remade model can be checked against a recorded fingerprint without keeping the original."""
    model_dir = Path(model_dir)
    if not (model_dir / "model.safetensors").is_file():
        raise FileNotFoundError(f"no model.safetensors in {model_dir}")
    digest = hashlib.sha256()
    weights = load_file(model_dir / "model.safetensors")
    for name in sorted(weights):
        tensor = weights[name].contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    digest.update(json.dumps(_tokenizer(model_dir), sort_keys=True).encode())
    return digest.hexdigest()


def compare_models(a: str | Path, b: str | Path) -> ModelComparison:
    """Compare the ``model.safetensors`` and ``tokenizer.json`` of two saved policies (Hugging Face dirs)."""
    a, b = Path(a), Path(b)
    for path in (a, b):
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"no model.safetensors in {path}")
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    shared = sorted(set(wa) & set(wb))
    missing = tuple(sorted(set(wa) ^ set(wb)))
    differing, reshaped, max_diff = [], [], 0.0
    for name in shared:
        x, y = wa[name], wb[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            differing.append(name)
            reshaped.append(name)
        elif not torch.equal(x, y):
            differing.append(name)
            max_diff = max(max_diff, float((x.double() - y.double()).abs().max()))
    return ModelComparison(tensors=len(shared), differing=tuple(differing), missing=missing,
                           reshaped=tuple(reshaped), max_abs_diff=max_diff,
                           tokenizer_identical=_tokenizer(a) == _tokenizer(b))
