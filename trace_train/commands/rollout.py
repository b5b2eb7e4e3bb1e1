"""``trace-rl rollout``: play a policy on a registered env; write trajectories.jsonl.

Everything that can be checked (counts, offsets, env id, seed range, the output file) is checked
before a model or env loads. The output is written atomically at the end, under an exclusive lock
on ``<out>.lock`` held for the whole run; an existing ``out`` is refused unless ``if_exists`` says
to append to it or overwrite it.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import track

from trace_train.paths import CONF_DIR

logger = logging.getLogger(__name__)

IF_EXISTS = ("error", "append", "overwrite")


def exit_with(command: str, message: str) -> NoReturn:
    """Print one line ``trace-rl <command>: <message>`` to stderr and exit with status 2."""
    Console(stderr=True).print(f"trace-rl {command}: {message}", style="red", markup=False, highlight=False,
                               soft_wrap=True)
    sys.exit(2)


def check_count(cfg: DictConfig, key: str, minimum: int) -> int:
    """``cfg[key]`` as an int >= ``minimum``; ``ValueError`` (saying what to set) otherwise."""
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer >= {minimum}, got {value!r}; set {key}=<integer>")
    if value < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {value}; set {key}=<integer >= {minimum}>")
    return value


def check_seed_range(split: str, episodes: int, offset: int = 0) -> None:
    """The split exists and holds seeds ``offset .. offset + episodes - 1``; ``ValueError`` otherwise."""
    from trace_envs.splits import SPLITS

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; set split= to one of {', '.join(sorted(SPLITS))}")
    if offset + episodes > len(SPLITS[split]):
        start, fix = (f" from offset={offset}", "episodes= or offset=") if offset else ("", "episodes=")
        raise ValueError(f"split {split!r} holds {len(SPLITS[split])} seeds; episodes={episodes}{start} "
                         f"goes past its end; lower {fix}")


def rollout_requests(env_id: str, env_kwargs: dict, split: str, episodes: int, offset: int = 0,
                     group_size: int = 1) -> list:
    from trace_envs.splits import split_seeds
    from trace_train.rollout.base import group_requests

    return group_requests(env_id, env_kwargs, split_seeds(split, episodes, offset), group_size)


def run_rollouts(backend, requests, sampling, adapter, batch: int, label: str = "rollout"):
    records = []
    chunks = [requests[i: i + batch] for i in range(0, len(requests), batch)]
    for chunk in track(chunks, description=label):
        records.extend(backend.rollout(chunk, sampling, adapter))
    return records


def check_existing_output(out: Path, if_exists: str) -> int:
    """Refuse an existing ``out`` unless ``if_exists`` allows it; returns its episode count (0 when new).

    With ``append`` the existing file must read cleanly: appending after a broken or truncated line
    would make the whole file unreadable.
    """
    from trace_train.trajectory import ReadReport, read_trajectories

    if not out.exists():
        return 0
    if not out.is_file():
        raise ValueError(f"out={out} exists and is not a file; choose another out=")
    if if_exists == "error":
        raise ValueError(f"out={out} already exists; set if_exists=append to add to it, if_exists=overwrite "
                         f"to replace it, or choose another out=")
    if if_exists == "overwrite":
        return 0
    report = ReadReport()
    records = read_trajectories(out, report)
    if report.truncated_last_line:
        raise ValueError(f"out={out} ends in a truncated line; repair the file or set if_exists=overwrite")
    return len(records)


def write_output(out: Path, records: list, if_exists: str) -> Path:
    """Write ``records`` to ``out``: the file alone, or (``append``) after its current bytes, atomically."""
    from trace_train.trajectory import dumps_line, validate_record, write_text_atomic, write_trajectories

    if if_exists != "append" or not out.exists():
        return write_trajectories(out, records)
    existing = out.read_text(encoding="utf-8")
    if existing and not existing.endswith("\n"):
        existing += "\n"
    rows = [validate_record(r.to_dict(), f"record {i} for {out}") for i, r in enumerate(records)]
    return write_text_atomic(out, existing + "".join(dumps_line(row) for row in rows))


def _warn_duplicates(out: Path) -> None:
    from trace_train.trajectory import iter_jsonl

    ids = Counter(row.get("episode_id") for row in iter_jsonl(out))
    repeated = sum(n - 1 for n in ids.values() if n > 1)
    if repeated:
        logger.warning("%s now holds %d repeated episode ids (same env, seed, policy, sampler seed); "
                       "use offset= to append new seeds", out, repeated)


def _checked(cfg: DictConfig) -> tuple[dict[str, int], str, list, Any]:
    """Validate all that needs no model and no env instance; returns (counts, if_exists, requests, policy spec)."""
    import gymnasium as gym

    import trace_envs
    from trace_train.policies import PolicySpec

    counts = {"episodes": check_count(cfg, "episodes", 1), "offset": check_count(cfg, "offset", 0),
              "group_size": check_count(cfg, "group_size", 1), "batch_episodes": check_count(cfg, "batch_episodes", 1)}
    if_exists = cfg.get("if_exists")
    if if_exists not in IF_EXISTS:
        raise ValueError(f"if_exists must be one of {', '.join(IF_EXISTS)}, got {if_exists!r}")
    if cfg.env not in gym.registry:
        raise ValueError(f"unknown env id {cfg.env!r}; registered trace ids: {trace_envs.trace_env_ids()}")
    check_seed_range(cfg.split, counts["episodes"], counts["offset"])
    requests = rollout_requests(cfg.env, OmegaConf.to_container(cfg.env_kwargs), cfg.split, counts["episodes"],
                                counts["offset"], counts["group_size"])
    spec = PolicySpec.from_dict(OmegaConf.to_container(cfg.policy, resolve=True))
    return counts, if_exists, requests, spec


@hydra.main(config_path=str(CONF_DIR), config_name="rollout", version_base=None)
def main(cfg: DictConfig) -> None:
    from trace_train.evaluation import summarize
    from trace_train.policies import build_backend
    from trace_train.trajectory import OutputBusyError, exclusive_output

    try:
        counts, if_exists, requests, spec = _checked(cfg)
    except ValueError as exc:
        exit_with("rollout", str(exc))
    out = Path(to_absolute_path(str(cfg.out)))
    try:
        with exclusive_output(out):  # held until the file is written: a second run on out fails at once
            try:
                before = check_existing_output(out, if_exists)
            except ValueError as exc:  # includes RecordError: a bad line of the file to append to
                exit_with("rollout", str(exc))
            backend, adapter = build_backend(spec)
            records = run_rollouts(backend, requests, spec.sampling, adapter, counts["batch_episodes"])
            write_output(out, records, if_exists)
            if before:
                _warn_duplicates(out)
    except OutputBusyError as exc:
        exit_with("rollout", str(exc))
    summary = summarize(records, policy=spec.name)
    added = f" (appended to {before})" if before else ""
    Console().print(f"{len(records)} episodes{added} of {spec.name} on {cfg.env}: success "
                    f"{summary.overall.rate:.3f}, mean reward {summary.mean_reward:.3f} -> {out}")
