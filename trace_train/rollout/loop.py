"""The rollout loop: requests for a split, batched play through a backend, the checks of the output file
(``trace_train.rollout.partial_output`` writes it, batch by batch).

Library code (evaluation, calibration, the pipeline, the bench) and the ``trace-rl rollout`` command
share this module; it imports nothing from the CLI. Progress display is the caller's: ``run_rollouts``
takes an optional ``progress`` wrapper (the command passes ``rich.progress.track``) and logs otherwise.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from trace_envs.records import ReadReport, TrajectoryRecord, iter_jsonl, read_trajectories

logger = logging.getLogger(__name__)

IF_EXISTS = ("error", "append", "overwrite")

Progress = Callable[..., Iterable[Any]]  # (sequence, description=...) -> the same items, displayed


def check_count(cfg: Any, key: str, minimum: int) -> int:
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
    """The episode requests for ``episodes`` seeds of ``split`` from ``offset``, ``group_size`` members each."""
    from trace_envs.splits import split_seeds
    from trace_train.rollout.base import group_requests

    return group_requests(env_id, env_kwargs, split_seeds(split, episodes, offset), group_size)


def run_rollouts(backend: Any, requests: Sequence[Any], sampling: Any, adapter: str | None, batch: int,
                 label: str = "rollout", progress: Progress | None = None,
                 on_batch: Callable[[list[TrajectoryRecord]], None] | None = None) -> list[TrajectoryRecord]:
    """Play ``requests`` through ``backend`` in chunks of ``batch``; the records in request order.

    ``on_batch`` gets each chunk's records as soon as it is played (to write them before the next chunk can fail).
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    records: list[TrajectoryRecord] = []
    chunks = [requests[i: i + batch] for i in range(0, len(requests), batch)]
    shown = progress(chunks, description=label) if progress is not None else chunks
    for index, chunk in enumerate(shown, start=1):
        played = backend.rollout(chunk, sampling, adapter)
        if on_batch is not None:
            on_batch(played)
        records.extend(played)
        if progress is None:
            logger.info("%s: %d/%d batches (%d episodes)", label, index, len(chunks), len(records))
    return records


def check_existing_output(out: Path, if_exists: str) -> int:
    """Refuse an existing ``out`` unless ``if_exists`` allows it; returns its episode count (0 when new).

    With ``append`` the existing file must read cleanly: appending after a broken or truncated line
    would make the whole file unreadable.
    """
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


def warn_duplicates(out: Path) -> None:
    """Log how many episode ids of ``out`` repeat (an append of the same seeds)."""
    ids = Counter(row.get("episode_id") for row in iter_jsonl(out))
    repeated = sum(n - 1 for n in ids.values() if n > 1)
    if repeated:
        logger.warning("%s now holds %d repeated episode ids (same env, seed, policy, sampler seed); "
                       "use offset= to append new seeds", out, repeated)
