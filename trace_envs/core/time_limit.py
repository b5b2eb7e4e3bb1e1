"""A wall-clock limit on a call that runs code we do not trust to return (an LLM-written env's methods).

``time_limit(seconds, what)`` arms ``SIGALRM`` for the block and raises :class:`CallTimeout` in it when the time
is up, then restores whatever timer and handler were there before (an outer limit keeps its remaining time).
Signals reach the main thread only: elsewhere, or where ``setitimer`` does not exist, the block runs without a
limit (logged once). ``CallTimeout`` derives from ``BaseException`` so that the limited code's own ``except
Exception`` cannot swallow it; callers turn it into an ordinary error at their boundary.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)
_warned = False


class CallTimeout(BaseException):
    """The limited block ran past its time."""


def _can_limit() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Run the block with at most ``seconds`` of wall-clock time (see the module docstring)."""
    global _warned
    if not _can_limit():
        if not _warned:
            _warned = True
            logger.warning("no time limit on %s: signals reach the main thread only", what)
        yield
        return

    def on_alarm(signum, frame):  # noqa: ARG001
        raise CallTimeout(f"{what} ran past its {seconds:g} s time limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay > 0:  # an outer timer keeps running with what it had left (at least a tick)
            signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - start), 1e-3), outer_interval)
