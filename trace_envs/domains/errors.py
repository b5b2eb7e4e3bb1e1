"""Errors shared by the family domains."""

from __future__ import annotations


class DrawFailed(Exception):
    """The world drawn from the seed cannot host the requested request; the family draws a new world.

    Raised by a domain's request primitives (e.g. the τ² user has no pending order); the retry
    consumes the same ``np_random``, so the episode stays a pure function of the seed.
    """
