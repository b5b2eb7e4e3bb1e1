"""``trace-rl bootstrap``: behaviour cloning of the tiny base agent (cached by config hash, resumable)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from trace_envs.atomic_io import publish_dir, set_plain_write_modes
from trace_train.bootstrap.compare import FINGERPRINT_PATTERN, made_from
from trace_train.commands._app import command_app
from trace_train.paths import AssetNotFoundError, shipped_checkpoint

logger = logging.getLogger(__name__)


def recorded_fingerprint(compare_to: str | None) -> str | None:
    """``compare_to`` when it is a recorded model fingerprint (64 hex digits, see
    :func:`trace_train.bootstrap.compare.model_fingerprint`), else None."""
    if compare_to is not None and FINGERPRINT_PATTERN.fullmatch(compare_to) and not Path(compare_to).exists():
        return compare_to
    return None


def reference_model(compare_to: str | None, config_hash: str) -> Path | None:
    """The model to compare a finished bootstrap with: ``compare_to=shipped`` is the shipped base when it was made
    from this very config (same hash), otherwise none; a recorded fingerprint or null is none; any other value is a
    model directory."""
    if compare_to is None or recorded_fingerprint(compare_to):
        return None
    if compare_to != "shipped":
        path = Path(compare_to).expanduser()
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"compare_to={compare_to}: no model.safetensors in {path}")
        return path
    try:
        shipped = shipped_checkpoint()
    except AssetNotFoundError:
        return None
    shipped_hash = made_from(shipped)
    if shipped_hash != config_hash:
        logger.info("config %s is not the shipped base's (%s): nothing to compare with", config_hash, shipped_hash)
        return None
    return shipped


@command_app("bootstrap")
def main(cfg: DictConfig) -> None:
    from trace_train.bootstrap.compare import compare_models, model_fingerprint
    from trace_train.bootstrap.config import BootstrapConfig
    from trace_train.bootstrap.trainer import BootstrapPaused, Bootstrapper
    from trace_train.commands._sweeps import check_multirun_output
    from trace_train.commands._validate import check_groups, fail, paused

    try:
        check_groups(cfg, "bootstrap")
        config = BootstrapConfig.from_dict(OmegaConf.to_container(cfg.bootstrap, resolve=True))
        if cfg.if_exists not in ("error", "overwrite"):
            raise ValueError(f"if_exists must be one of error, overwrite; got {cfg.if_exists!r}")
        if cfg.export_to:
            check_multirun_output(cfg, "export_to", "checkpoints/sweep-${hydra:job.num}", "its exported model")
        if cfg.export_to and Path(cfg.export_to).exists() and not Path(cfg.export_to).is_dir():
            raise ValueError(f"export_to={cfg.export_to} exists and is not a directory (if_exists=overwrite replaces "
                             "only an exported model directory); choose another export_to=")
        if cfg.export_to and Path(cfg.export_to).exists() and cfg.if_exists != "overwrite":
            raise ValueError(f"export_to={cfg.export_to} already exists; choose another directory or set "
                             "if_exists=overwrite to replace it")
        if not cfg.cache_dir or (Path(cfg.cache_dir).exists() and not Path(cfg.cache_dir).is_dir()):
            raise ValueError(f"cache_dir={cfg.cache_dir}: not a directory; set cache_dir=<directory for the "
                             "bootstrap cache>")
        if cfg.export_to and Path(cfg.export_to).exists():  # if_exists=overwrite: refused before any training
            check_replaceable(Path(cfg.export_to), Path(cfg.cache_dir))
        runner = Bootstrapper(config, Path(cfg.cache_dir))
        reference = reference_model(cfg.compare_to, runner.config_hash)  # checked before hours of training
    except (TypeError, ValueError, FileNotFoundError) as exc:
        fail("bootstrap", str(exc))
    try:
        summary = runner.run(linear_probes=True)
    except BootstrapPaused as exc:
        paused("bootstrap", str(exc))
    except ValueError as exc:  # e.g. a damaged cache file: named, with how to recover
        fail("bootstrap", str(exc))
    logger.info("bootstrap %s: %s", runner.config_hash, json.dumps(summary["probe"]))
    fingerprint = summary.get("model_fingerprint") or model_fingerprint(runner.model_dir)  # older caches lack it
    console = Console(stderr=True)

    def say(line: str, ok: bool | None = None) -> None:  # one line, whatever the terminal width
        logger.info("bootstrap %s: %s", runner.config_hash, line)
        console.print(line, style={True: "green", False: "yellow", None: None}[ok], markup=False, highlight=False,
                      soft_wrap=True)

    say(f"model fingerprint {fingerprint}")
    if reference is not None:
        comparison = compare_models(runner.model_dir, reference)
        say(f"compared with {reference}: {comparison.summary()}", comparison.identical)
    expected = recorded_fingerprint(cfg.compare_to)
    if expected is not None:
        say(f"compared with the recorded fingerprint {expected}: "
            + ("bit for bit identical" if fingerprint == expected else "different"), fingerprint == expected)
    if cfg.export_to:
        export(runner.model_dir, summary, Path(cfg.export_to))


EXPORTED_MODEL_FILES = ("bootstrap.json", "config.json")  # what an export writes and if_exists=overwrite requires


def check_replaceable(target: Path, cache_dir: Path) -> None:
    """``if_exists=overwrite`` replaces only a model directory that ``export_to`` wrote (it holds
    :data:`EXPORTED_MODEL_FILES`) and that neither is nor holds ``cache_dir``; any other directory raises
    ``ValueError`` (a mistyped ``export_to=checkpoints`` would otherwise replace every model in it)."""
    missing = [name for name in EXPORTED_MODEL_FILES if not (target / name).is_file()]
    if missing:
        raise ValueError(f"export_to={target} is not an exported model directory (no {' or '.join(missing)}): "
                         "if_exists=overwrite replaces only a model that export_to wrote; choose another export_to=")
    target, cache = target.resolve(), cache_dir.resolve()
    if target == cache or target in cache.parents:
        raise ValueError(f"export_to={target} holds the bootstrap cache cache_dir={cache}: if_exists=overwrite "
                         "would replace it; choose another export_to=")


def export(model_dir: Path, summary: dict, target: Path) -> None:
    """Copy the finished model and its ``bootstrap.json`` to ``target`` by :func:`publish_dir`: a kill leaves the
    old export or the new one whole. Files get the modes a plain write gives (a cache made before the bootstrap
    set them holds a ``model.safetensors`` of mode 0o600)."""
    def write(tmp: Path) -> None:
        shutil.copytree(model_dir, tmp, dirs_exist_ok=True)
        (tmp / "bootstrap.json").write_text(json.dumps(summary, indent=2))
        set_plain_write_modes(tmp)

    publish_dir(target, write)
    logger.info("exported the bootstrapped model to %s", target)
