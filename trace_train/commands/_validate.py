"""Validation shared by the commands: counts, paths, env ids, and a clean exit that leaves no empty run dir.

Hydra creates a command's run directory (``outputs/<command>/<time>/`` with ``.hydra/`` and ``<job>.log``)
before the command's code runs. :func:`fail` removes that directory again when it holds nothing but
Hydra's own files, so a command refused on bad input leaves no empty ``outputs/`` folder behind.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from rich.console import Console

logger = logging.getLogger(__name__)

_HYDRA_FILES = {".hydra"}


class ConfigError(ValueError):
    """Bad user input, found before any work: the message says what to fix."""


class CommandExit(SystemExit):
    """A command's non-zero exit with its one-line reason (:func:`fail`, :func:`paused`, a calibration gate not
    met): a plain ``SystemExit`` to everything else; a ``-m`` sweep (``trace_train.commands._app``) records the
    reason of each job that failed and names them all at the end."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code)
        self.message = message


def hydra_run_dir() -> Path | None:
    """The current Hydra run's output directory, or ``None`` outside a Hydra app."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except (ImportError, ValueError):
        return None


def remove_untouched_run_dir(run_dir: Path | None) -> bool:
    """Delete ``run_dir`` (and its empty parents up to the working directory) if it only holds Hydra's
    own files (``.hydra/``, ``*.log``); returns whether it was removed."""
    if run_dir is None or not run_dir.is_dir():
        return False
    here = Path.cwd().resolve()
    if run_dir.resolve() == here or run_dir.resolve() in here.parents:
        return False  # never the working directory itself (hydra.run.dir=.)
    for entry in run_dir.iterdir():
        if entry.name not in _HYDRA_FILES and not (entry.is_file() and entry.suffix == ".log"):
            return False
    shutil.rmtree(run_dir, ignore_errors=True)
    stop = Path.cwd().resolve()
    parent = run_dir.resolve().parent
    while parent != stop and stop in parent.parents and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return True


def print_error(command: str, message: str, style: str = "red") -> str:
    """Print ``trace-rl <command>: <message>`` on stderr as one line; returns the message as printed."""
    message = " ".join(str(message).split())
    Console(stderr=True).print(f"trace-rl {command}: {message}", style=style, markup=False, highlight=False,
                               soft_wrap=True)
    return message


def fail(command: str, message: str) -> NoReturn:
    """Print ``trace-rl <command>: <message>`` on stderr (one line), remove an untouched Hydra run dir, exit 2."""
    remove_untouched_run_dir(hydra_run_dir())
    raise CommandExit(2, print_error(command, message))


PAUSED_EXIT_CODE = 3  # a run stopped at its time budget with its checkpoint saved; the same command continues it


def paused(command: str, message: str) -> NoReturn:
    """Print ``trace-rl <command>: <message>`` on stderr (a run paused at its budget) and exit 3."""
    raise CommandExit(PAUSED_EXIT_CODE, print_error(command, message, style="yellow"))


def positive_int(cfg: Any, key: str, minimum: int = 1) -> int:
    """``cfg.<key>`` (a dotted key) as an int >= ``minimum``; :class:`ConfigError` naming the key otherwise."""
    value: Any = cfg
    for part in key.split("."):
        value = value.get(part) if hasattr(value, "get") else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {value!r}; set {key}=<integer>")
    if value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value}; set {key}=<integer >= {minimum}>")
    return value


def positive_ints(cfg: Any, keys: Sequence[str], minimum: int = 1) -> None:
    """:func:`positive_int` on every key that is present (not ``None``)."""
    for key in keys:
        value: Any = cfg
        for part in key.split("."):
            value = value.get(part) if hasattr(value, "get") else None
        if value is not None:
            positive_int(cfg, key, minimum)


def fraction(value: Any, key: str, low: float = 0.0, high: float = 1.0) -> float:
    """``value`` as a float in [low, high); :class:`ConfigError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= float(value) < high:
        raise ConfigError(f"{key} must be a number in [{low}, {high}), got {value!r}")
    return float(value)


def existing_path(value: Any, key: str, kind: str = "file or directory", need: str | None = None,
                  must_be: Literal["file", "dir"] | None = None) -> Path:
    """``value`` resolved against the original working directory; :class:`ConfigError` if it does not exist,
    is not a file / a directory (``must_be``), or, with ``need``, lacks the file ``need`` inside it."""
    from hydra.utils import to_absolute_path

    if value in (None, "", "???"):
        raise ConfigError(f"{key} is required: set {key}=<{kind}>")
    try:
        path = Path(to_absolute_path(str(value)))
    except ValueError:
        path = Path(str(value)).absolute()
    if not path.exists():
        raise ConfigError(f"{key}={value}: no such {kind}; set {key}=<{kind}>")
    if (must_be == "dir" and not path.is_dir()) or (must_be == "file" and not path.is_file()):
        raise ConfigError(f"{key}={value}: not a {'directory' if must_be == 'dir' else 'file'}; "
                          f"set {key}=<{kind}>")
    if need and not (path / need).exists():
        raise ConfigError(f"{key}={value}: no {need} in it; not a {kind}; set {key}=<{kind}>")
    return path


def known_env(env_id: str, key: str = "env") -> None:
    """Raise :class:`ConfigError` if ``env_id`` is not a registered (or importable ``module:id``) env.

    Uses the shared env reference resolver (``trace_envs.env_refs.resolve_env_ids``). No model is loaded.
    """
    from trace_envs.env_refs import resolve_env_ids

    try:
        resolve_env_ids([str(env_id)])
    except ValueError as exc:
        raise ConfigError(f"{key}={env_id}: unknown env ({exc}); register it or pass module:id") from exc


def _lookup(cfg: Any, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = value.get(part) if hasattr(value, "get") else None
    return value


def check_counts(cfg: Any, counts: Mapping[str, int]) -> None:
    """Every present (not ``None``) dotted key of ``counts`` is an int >= its minimum; a list value
    (``synthesis.pass_k``) must hold such ints only. :class:`ConfigError` naming the key otherwise."""
    for key, minimum in counts.items():
        value = _lookup(cfg, key)
        if value is None:
            continue
        if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
            for item in value:
                if isinstance(item, bool) or not isinstance(item, int) or item < minimum:
                    raise ConfigError(f"{key} must list integers >= {minimum}, got {list(value)!r}; "
                                      f"set {key}=[<integer >= {minimum}>, ...]")
            continue
        positive_int(cfg, key, minimum)


def check_fractions(cfg: Any, keys: Sequence[str], low: float = 0.0, high: float = 1.0) -> None:
    """Every present dotted key is a number in the closed interval [low, high]; :class:`ConfigError` otherwise."""
    for key in keys:
        value = _lookup(cfg, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= float(value) <= high:
            raise ConfigError(f"{key} must be a number in [{low:g}, {high:g}], got {value!r}; "
                              f"set {key}=<number in [{low:g}, {high:g}]>")


# The count (key -> minimum) and fraction ([0, 1]) keys of each config group a command composes.
GROUP_COUNTS: dict[str, dict[str, int]] = {
    "grpo": {"iterations": 1, "groups_per_iter": 1, "group_size": 1, "ppo_epochs": 1, "mini_batches": 1,
             "micro_batch_size": 1, "max_new_tokens": 1, "checkpoint_every": 1, "threads": 0, "lora.r": 1},
    "analysis": {"k": 1, "n_runs": 1, "llm.max_tokens": 1, "llm.retries": 0, "llm.label_retries": 0,
                 "llm.batch_size": 1, "llm.max_candidates": 1, "llm.discovery_max_chars": 1,
                 "llm.max_tool_chars": 1},
    "synthesis": {"n_seeds": 1, "group_size": 1, "seed_offset": 0, "pass_k": 1, "search.max_trials": 1,
                  "llm.max_tokens": 1, "llm.retries": 0, "llm.max_attempts": 1, "llm.n_failed_examples": 0,
                  "llm.validation.n_seeds": 1, "llm.validation.baseline_seeds": 1,
                  "llm.validation.determinism_seeds": 1, "llm.validation.random_turns": 1,
                  "llm.validation.memory_mb": 1, "llm.validation.file_size_mb": 1,
                  "llm.validation.max_processes": 1, "llm.validation.max_bytes": 1, "llm.validation.max_lines": 1},
    "moe": {"gate.top_k": 1, "train.epochs": 1, "train.batch_size": 1, "train.grad_accum": 1, "train.max_len": 1,
            "train.pad_id": 0},
    "bootstrap": {"vocab_size": 1, "tokenizer_episodes": 1, "steps": 1, "batch_size": 1, "warmup_steps": 0,
                  "max_len": 1, "threads": 1, "checkpoint_every": 1, "probe_episodes": 1, "stop_step": 1,
                  "data_offset_steps": 0},
    "pipeline": {"rollouts.episodes": 1, "rollouts.offset": 0, "rollouts.batch_episodes": 1,
                 "train.max_capabilities": 1, "compose.max_examples_per_capability": 1, "eval.episodes": 1,
                 "eval.trials": 1, "eval.curve_episodes": 0, "eval.batch_episodes": 1, "policy.max_new_tokens": 1,
                 "policy.threads": 1, "workers": 1},
}
GROUP_FRACTIONS: dict[str, tuple[str, ...]] = {
    "pipeline": ("policy.top_p",),
    "grpo": ("hint_fraction", "top_p"),
    "analysis": ("rho", "programmatic.noise_rate", "llm.min_labeled_fraction"),  # delta: [-1, 1], below
    "synthesis": ("hint_fraction", "policy.hint_uptake", "gate.reward_min", "gate.reward_max", "gate.success_min",
                  "gate.success_max", "gate.min_std", "gate.max_all_success", "gate.max_all_zero",
                  "gate.max_constant", "llm.validation.oracle_min", "llm.validation.baseline_max",
                  "llm.validation.min_distinct"),
    "moe": ("train.warmup_frac",),
    "bootstrap": ("min_lr_ratio", "hint_fraction", "hint_uptake"),
}


def check_groups(cfg: Any, *groups: str) -> None:
    """:func:`check_counts` and :func:`check_fractions` on the named config groups (keys as ``<group>.<key>``)."""
    for group in groups:
        if _lookup(cfg, group) is None:
            continue
        check_counts(cfg, {f"{group}.{k}": m for k, m in GROUP_COUNTS[group].items()})
        check_fractions(cfg, [f"{group}.{k}" for k in GROUP_FRACTIONS[group]])
        if group == "analysis":  # δ thresholds Δ, a difference of two shares (AnalysisConfig: [-1, 1])
            check_fractions(cfg, ["analysis.delta"], low=-1.0)
    if _lookup(cfg, "analysis") is not None:
        k, n_runs = _lookup(cfg, "analysis.k"), _lookup(cfg, "analysis.n_runs")
        for key, value in (("analysis.k", k), ("analysis.n_runs", n_runs)):
            if value is None:
                raise ConfigError(f"{key} must be an integer >= 1, got null; set {key}=<integer>")
        if k > n_runs:
            raise ConfigError(f"analysis.k={k} exceeds analysis.n_runs={n_runs}: no capability could pass; "
                              f"set analysis.k=<integer <= {n_runs}>")


def model_dir(value: Any, key: str) -> str:
    """A model reference: an existing local directory (with ``config.json``), resolved against the original
    working directory, or a hub id (``org/name``). A local-looking path that does not exist is a
    :class:`ConfigError` saying what to set, so no command falls through to a hub on a typo."""
    from hydra.utils import to_absolute_path

    if value in (None, "", "???"):
        raise ConfigError(f"{key} is required: set {key}=<Hugging Face model directory>")
    text = str(value)
    try:
        path = Path(to_absolute_path(text)).expanduser()
    except ValueError:
        path = Path(text).expanduser().absolute()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ConfigError(f"{key}={value}: no config.json in it; set {key}=<Hugging Face model directory>")
        return str(path)
    parts = Path(text).parts
    local = (text.startswith((".", "/", "~")) or Path(text).suffix != "" or len(parts) > 2
             or Path(to_absolute_path(parts[0])).is_dir())
    if local:
        raise ConfigError(f"{key}={value}: no such model directory; set {key}=<Hugging Face model directory>")
    return text


def check_policy_spec(spec: Any, key: str) -> None:
    """A policy spec's counts, ``top_p`` and local directories (``model``, ``adapter``), named ``<key>.<field>``;
    scripted kinds have no model to check."""
    for name in ("max_new_tokens", "threads", "max_batch"):
        value = getattr(spec, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{key}.{name} must be an integer >= 1, got {value!r}; set {key}.{name}=<integer >= 1>")
    if not 0.0 < float(spec.top_p) <= 1.0:
        raise ConfigError(f"{key}.top_p must be in (0, 1], got {spec.top_p!r}; set {key}.top_p=<number in (0, 1]>")
    temperature = spec.temperature
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ConfigError(f"{key}.temperature must be a number >= 0 (0 decodes greedily, as {key}.greedy=true "
                          f"does), got {temperature!r}; set {key}.temperature=<number >= 0>")
    if spec.kind == "expert":  # the scripted expert's knobs, each a probability of its mistake
        from trace_envs.retail_sim import ExpertKnobs

        try:
            ExpertKnobs(**dict(spec.knobs or {}))
        except TypeError as exc:
            raise ConfigError(f"{key}.knobs={dict(spec.knobs)}: {exc}; the knobs are precondition, structured, "
                              "multi_step, precision") from None
        except ValueError as exc:
            raise ConfigError(f"{key}.knobs: {exc}; set {key}.knobs.<name>=<number in [0, 1]>") from None
    if spec.kind in ("hf", "composed", "task_router", "openai"):
        model_dir(spec.model, f"{key}.model")
    if spec.kind in ("hf", "composed", "task_router") and spec.adapter:
        existing_path(spec.adapter, f"{key}.adapter", "adapter directory", must_be="dir")
    if spec.kind == "task_router" and spec.route_corpus:
        existing_path(spec.route_corpus, f"{key}.route_corpus", "route corpus JSON file", must_be="file")
    if spec.kind == "task_router" and spec.adapter:  # every adapter needs a description to be routed to
        from trace_moe.routers import composition_labels

        composition_labels(spec.adapter, spec.route_descriptions or None)


def check_bool(cfg: Any, key: str) -> bool:
    """``cfg.<key>`` as a bool: only ``true`` / ``false`` (``no``, ``0``, ``yes`` are refused, not read as truthy)."""
    value = _lookup(cfg, key)
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}; set {key}=true or {key}=false")
    return value


def env_kwargs_dict(value: Any, key: str = "env_kwargs") -> dict[str, Any]:
    """``value`` (a config node or None) as a dict of gym.make kwargs; :class:`ConfigError` naming ``key`` otherwise."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a mapping of env keyword arguments, got {value!r}; "
                          f"set {key}={{name: value}} or +{key}.<name>=<value>")
    return {str(k): v for k, v in value.items()}


def check_env_kwargs(env_ids: Sequence[str], env_kwargs: Mapping[str, Any], key: str = "env_kwargs") -> None:
    """Every env of ``env_ids`` takes ``env_kwargs``: each is built once (and closed) when kwargs are given, so an
    unknown or out-of-range keyword is one :class:`ConfigError` before any model loads. Ids must resolve already."""
    if not env_kwargs:
        return
    import gymnasium as gym

    for env_id in env_ids:
        try:
            env = gym.make(str(env_id), **dict(env_kwargs))
        except (TypeError, ValueError, KeyError) as exc:
            reason = str(exc).split(" was raised from the environment creator")[0]
            raise ConfigError(f"{key}={dict(env_kwargs)} does not fit env {env_id}: {reason}") from None
        env.close()


RESULTS_IF_EXISTS = ("error", "overwrite")


def check_results_dir(out: Path, key: str, result_files: Callable[[Path], list[Path]],
                      if_exists: Any) -> list[tuple[Path, int]]:
    """The files an earlier run of the command wrote into the output directory ``out`` (``result_files(out)``, read
    from that run's own index, e.g. the policies its ``eval.json`` names: a user's file of a similar name is never
    one): :class:`ConfigError` when there are some and ``if_exists`` is not ``overwrite`` (nothing is silently
    replaced), or when ``out`` is a file. Returns them with their modification times for
    :func:`remove_stale_results`."""
    if if_exists not in RESULTS_IF_EXISTS:
        raise ConfigError(f"if_exists must be one of {', '.join(RESULTS_IF_EXISTS)}, got {if_exists!r}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{key}={out}: exists and is not a directory; set {key}=<directory>")
    found = sorted(p for p in set(result_files(out)) if p.is_file()) if out.is_dir() else []
    if found and if_exists != "overwrite":
        names = ", ".join(str(p.relative_to(out)) for p in found[:3]) + (", ..." if len(found) > 3 else "")
        raise ConfigError(f"{key}={out} already holds results ({names}); choose another {key}= or set "
                          "if_exists=overwrite to replace them")
    return [(p, p.stat().st_mtime_ns) for p in found]


def remove_stale_results(earlier: Sequence[tuple[Path, int]]) -> None:
    """After the new run wrote its results (``if_exists=overwrite``): remove the earlier run's files it did not
    write again (unchanged since :func:`check_results_dir`; every result is written atomically, as a new file),
    so none stays beside the new results. Nothing is removed before the new results exist: a run stopped half-way
    leaves the earlier results as they were."""
    for path, mtime in earlier:
        try:
            if path.stat().st_mtime_ns == mtime:
                path.unlink()
        except FileNotFoundError:
            pass
