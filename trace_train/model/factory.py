"""Build, save and load policies: tiny Qwen3 presets from a config, or any HF checkpoint.

The presets follow ``reference/tiny-model-atomic-ids.md``: at a fixed CPU budget the fast 2-layer
``tiny`` shape (hidden 128, 4/2 heads, tied embeddings, ~0.8 M parameters with a ~3 k vocab) copied
atomic ids best. ``load_policy`` takes a local HF directory or, where a hub is reachable, a hub
name such as ``Qwen/Qwen3-30B-A3B-Instruct-2507`` — the same code path either way.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelPreset:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int = 4096  # retail-sim episodes: ~2.1k tokens mean, 3.2k max
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True


PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=384),
    "small": ModelPreset(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                         intermediate_size=768),
}


class PolicyLoadError(RuntimeError):
    """A policy could not be loaded (missing directory, unreachable hub, broken checkpoint)."""


def model_config(preset: str | ModelPreset, tokenizer: PreTrainedTokenizerBase, **overrides: Any) -> Qwen3Config:
    """A ``Qwen3Config`` for ``preset`` sized to ``tokenizer`` (vocab, eos, pad)."""
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise KeyError(f"unknown model preset {preset!r}; known: {sorted(PRESETS)}")
        preset = PRESETS[preset]
    fields = asdict(preset)
    fields.update(overrides)
    head_dim = fields["hidden_size"] // fields["num_attention_heads"]
    return Qwen3Config(
        vocab_size=len(tokenizer),
        head_dim=head_dim,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        rms_norm_eps=1e-6,
        use_cache=True,
        **fields,
    )


def build_model(
    preset: str | ModelPreset, tokenizer: PreTrainedTokenizerBase, seed: int = 0, **overrides: Any
) -> Qwen3ForCausalLM:
    """A freshly initialised ``Qwen3ForCausalLM``; weights depend only on ``seed`` (global RNG untouched)."""
    config = model_config(preset, tokenizer, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    logger.info("built %s model: %.2fM parameters", preset if isinstance(preset, str) else "custom",
                count_parameters(model) / 1e6)
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def save_policy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> Path:
    """Save model and tokenizer together in Hugging Face format."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def is_local_path(name_or_path: str | Path) -> bool:
    """Whether ``load_policy`` reads ``name_or_path`` as a local directory rather than a hub id.

    Local: it exists, or starts with ``.``, ``/`` or ``~``, or has more than one ``/`` (a hub id is ``name`` or
    ``org/name``, and may hold dots: ``Qwen/Qwen3-0.6B``, ``meta-llama/Llama-3.1-8B-Instruct``)."""
    text = str(name_or_path)
    return Path(text).expanduser().exists() or text.startswith((".", "/", "~")) or text.count("/") > 1


# What a damaged or missing checkpoint raises while loading: transformers' OSError / ValueError, a truncated
# *.safetensors file's SafetensorError, KeyError / TypeError from ill-shaped JSON, RuntimeError from transformers or
# torch on weights they cannot place, huggingface_hub's StrictDataclassError for a config.json that contradicts itself
# (num_hidden_layers vs layer_types), and the tokenizers library's bare ``Exception`` (it has no exception class of
# its own). Tensors missing or of another shape than config.json says are reported by from_pretrained
# (``_weights_mismatch``) and refused too; unexpected ones (extra heads some hub checkpoints carry) are only logged.
_LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError, StrictDataclassError)
_LOADING_PROBLEMS = ("missing_keys", "mismatched_keys")  # from_pretrained's output_loading_info: refused


def _weights_mismatch(info: Mapping[str, Any]) -> str | None:
    """What ``from_pretrained(..., output_loading_info=True)`` reports wrong with the weights it read, or None. A
    missing tensor would otherwise be initialised at random with only a logged warning."""
    problems = []
    for key in _LOADING_PROBLEMS:
        names = sorted(_key_text(k) for k in info.get(key) or ())
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            problems.append(f"{key.replace('_', ' ')} {shown}")
    return "; ".join(problems) or None


def _key_text(key: Any) -> str:
    """A reported key: a tensor's name, or for a mismatched size ``(name, shape in the weights, shape wanted)``."""
    if isinstance(key, tuple) and len(key) == 3:
        name, found, wanted = key
        return f"{name} ({list(found)} in the weights, {list(wanted)} by config.json)"
    return str(key)


def load_policy(
    name_or_path: str | Path,
    device: str = "cpu",
    dtype: torch.dtype | str = torch.float32,
    local_files_only: bool | None = None,
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from a local HF directory or a hub name.

    A name that is not a local path (:func:`is_local_path`) is treated as a hub id; when the hub cannot be
    reached (or ``local_files_only``) and it is not cached, raises ``PolicyLoadError``. A missing local
    directory, damaged files in one, or weights that do not match ``config.json`` (a tensor missing or of another
    shape) raise ``PolicyLoadError`` too; tensors the model does not use are logged and ignored.
    """
    path = Path(name_or_path).expanduser()
    is_local = is_local_path(name_or_path)
    if is_local and not path.is_dir():
        problem = "is not a directory" if path.exists() else "does not exist"
        raise PolicyLoadError(f"policy directory {str(name_or_path)!r} {problem}")
    source = str(path) if is_local else str(name_or_path)
    kwargs: dict[str, Any] = {}
    if local_files_only is not None:
        kwargs["local_files_only"] = local_files_only
    part = "its tokenizer (tokenizer.json, tokenizer_config.json, config.json)"
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        part = "its model (config.json, the *.safetensors weights)"
        # mismatched sizes are reported (and refused below) rather than raised as a RuntimeError that names no tensor
        model, info = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, output_loading_info=True,
                                                           ignore_mismatched_sizes=True, **kwargs)
        if info.get("unexpected_keys"):
            logger.warning("%s: the weights hold tensors the model does not use, ignored: %s", source,
                           ", ".join(sorted(map(str, info["unexpected_keys"]))[:5]))
        mismatch = _weights_mismatch(info)
        if mismatch:
            raise ValueError(f"the weights do not match config.json ({mismatch})")
    except Exception as exc:
        if not isinstance(exc, _LOAD_ERRORS) and type(exc) is not Exception:  # bare Exception: tokenizers
            raise
        if isinstance(exc, SafetensorError) and is_local:
            weights = ", ".join(sorted(p.name for p in path.glob("*.safetensors"))) or "*.safetensors"
            part = f"its weights {weights} (damaged or truncated)"
        where = "local directory" if is_local else (
            f"hub model (there is no local directory {path.resolve()}; is the hub reachable? the shipped base is "
            "${shipped:retail-sim-tiny} in a config, trace_train.paths.shipped_checkpoint() in code)")
        detail = " ".join(str(exc).split())  # one line
        raise PolicyLoadError(f"could not load policy {source!r} as a {where}, reading {part}: {detail}") from exc
    model.to(device)
    model.eval()
    return model, tokenizer


def policy_from_config(
    cfg: Mapping[str, Any],
    corpus: Iterable[str] | None = None,
    atomic_tokens: Sequence[str] = (),
    device: str = "cpu",
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` from a ``conf/model/*.yaml`` mapping.

    With ``name_or_path`` set, the checkpoint is loaded (``load_policy``); otherwise a tokenizer is
    trained on ``corpus`` + ``atomic_tokens`` and a fresh ``preset`` model is built.
    """
    from trace_train.model.tokenizer import build_tokenizer

    dtype = getattr(torch, str(cfg.get("dtype") or "float32"))
    if cfg.get("name_or_path"):
        return load_policy(cfg["name_or_path"], device=device, dtype=dtype)
    if corpus is None:
        raise ValueError("building a policy from a preset needs a tokenizer corpus")
    tok_cfg = dict(cfg.get("tokenizer") or {})
    seed = int(cfg.get("seed", 0))
    tokenizer = build_tokenizer(corpus, atomic_tokens, seed=seed, **tok_cfg)
    model = build_model(cfg.get("preset") or "tiny", tokenizer, seed=seed).to(device=device, dtype=dtype)
    return model, tokenizer
