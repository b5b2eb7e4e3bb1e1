"""Every command's Hydra app: what all commands share around their own code, in one place.

``@command_app("analyze", check=check_values)`` on a command's ``main(cfg)`` makes it the Hydra app of
``conf/analyze.yaml`` and adds, for every job:

* the top-level keys of the config are the command's (``conf/<command>.yaml`` and its config groups): a
  misspelt ``+labeller=llm`` is refused with the closest known key, as a misspelt key of a group is (with a
  user's ``-cn`` config, only the keys the command line adds are checked);
* in a ``-m`` sweep, the values of every job are checked before the first job runs (``check`` on each job's
  composed config, and the top-level keys), so a bad value of job 3 does not stop the sweep after jobs 0-2;
* in a ``-m`` sweep, a job that fails (a one-line refusal, a gate not met, an exception) is recorded and the sweep
  goes on to its next job; at the end the command names every failed job and exits with the first one's code.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

logger = logging.getLogger(__name__)

Task = Callable[[DictConfig], Any]


@dataclass(frozen=True)
class JobFailure:
    """One failed job of a ``-m`` sweep."""

    num: int
    overrides: tuple[str, ...]
    code: int
    reason: str

    def describe(self) -> str:
        return f"#{self.num} ({' '.join(self.overrides) or 'no overrides'}): {self.reason} (exit {self.code})"


@dataclass
class _Sweep:
    """The jobs of the ``-m`` sweep in progress (one per process)."""

    jobs: int = 0
    failures: list[JobFailure] | None = None

    def reset(self) -> None:
        self.jobs, self.failures = 0, []


_SWEEP = _Sweep()


def check_top_level_keys(cfg: DictConfig, command: str, config_name: str, overrides: list[str] | tuple[str, ...]
                         ) -> None:
    """:class:`~trace_envs.config_builder.ConfigError` for a top-level key that is not one of the command's. With
    the command's own config every key is checked; with a user's config (``-cn``) only the keys the command line
    adds (``+key=``), since that config may hold top-level keys of its own (e.g. for interpolation)."""
    from trace_envs.config_builder import check_keys
    from trace_train.confdoc import top_level_keys
    from trace_train.paths import CONF_DIR

    if config_name == command:
        keys = [str(k) for k in cfg.keys()]
    else:
        keys = [key for key in (o.lstrip("+~").split("=", 1)[0] for o in overrides if o.startswith("+"))
                if "." not in key and "/" not in key]
    check_keys(keys, top_level_keys(CONF_DIR, command))


def _check_every_job(command: str, check: Task | None) -> None:
    """At the sweep's first job: compose each job's config and check it; the first bad one is a one-line refusal
    naming the job, before any job's work."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException

    from trace_train.commands._sweeps import sweep_jobs
    from trace_train.commands._validate import fail

    jobs = sweep_jobs()
    if jobs is None:
        logger.info("this sweeper's jobs are not known in advance: each job's values are checked as it starts")
        return
    config_name = HydraConfig.get().job.config_name
    for num, overrides in enumerate(jobs):
        try:
            job_cfg = compose(config_name=config_name, overrides=overrides)
            check_top_level_keys(job_cfg, command, config_name, overrides)
            if check is not None:
                check(job_cfg)
        except (ValueError, TypeError, KeyError, HydraException) as exc:  # ConfigError; OmegaConf's: ValueErrors
            fail(command, f"{exc} (job #{num} of this sweep: {' '.join(overrides)}; no job was run)")


def _run_job(command: str, task: Task, cfg: DictConfig) -> None:
    """One job of a sweep: its failure is recorded, not raised, so the next job runs."""
    from hydra.core.hydra_config import HydraConfig

    from trace_train.commands._validate import CommandExit

    job = HydraConfig.get().job
    num, overrides = int(job.num), tuple(str(o) for o in HydraConfig.get().overrides.task)
    _SWEEP.jobs += 1
    try:
        task(cfg)
        return
    except CommandExit as exc:
        if exc.code in (0, None):
            return
        failure = JobFailure(num, overrides, int(exc.code), exc.message)
    except SystemExit as exc:
        if exc.code in (0, None):
            return
        code = exc.code if isinstance(exc.code, int) else 1
        failure = JobFailure(num, overrides, code, str(exc.code) if not isinstance(exc.code, int) else "exited")
    except Exception as exc:  # noqa: BLE001  (logged with its traceback; the sweep goes on and fails at the end)
        logger.exception("trace-rl %s: job #%d failed", command, num)
        failure = JobFailure(num, overrides, 1, f"{type(exc).__name__}: {exc}")
    assert _SWEEP.failures is not None
    _SWEEP.failures.append(failure)
    logger.warning("trace-rl %s: job #%d failed: %s; the sweep goes on", command, num, failure.reason)


def command_app(command: str, check: Task | None = None) -> Callable[[Task], Callable[[], None]]:
    """Decorate a command's ``main(cfg)``: the Hydra app of ``conf/<command>.yaml`` with the shared checks and the
    sweep's failure report of this module. ``check`` (the command's own checks of its values, no file written)
    runs on every job's config before a sweep's first job; the command calls it itself too."""
    import hydra

    from trace_train.paths import CONF_DIR

    def decorate(task: Task) -> Callable[[], None]:
        def checked(cfg: DictConfig) -> None:
            from hydra.core.hydra_config import HydraConfig

            from trace_train.commands._validate import fail

            hydra_cfg = HydraConfig.get()
            try:
                check_top_level_keys(cfg, command, hydra_cfg.job.config_name, list(hydra_cfg.overrides.task))
            except ValueError as exc:
                fail(command, str(exc))
            task(cfg)

        @functools.wraps(task)
        def job(cfg: DictConfig) -> None:
            from hydra.core.hydra_config import HydraConfig

            from trace_train.commands._sweeps import in_multirun

            if not in_multirun():
                checked(cfg)
                return
            if int(HydraConfig.get().job.num) == 0:
                _check_every_job(command, check)
            _run_job(command, checked, cfg)

        app = hydra.main(config_path=str(CONF_DIR), config_name=command, version_base=None)(job)

        @functools.wraps(task)
        def main() -> None:
            from trace_train.commands._validate import CommandExit, print_error

            _SWEEP.reset()
            app()
            failures = _SWEEP.failures or []
            if failures:
                message = print_error(command, f"{len(failures)} of {_SWEEP.jobs} jobs of this sweep failed: "
                                               + "; ".join(f.describe() for f in failures))
                raise CommandExit(failures[0].code, message)

        return main

    return decorate
