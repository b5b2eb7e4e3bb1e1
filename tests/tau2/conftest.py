"""τ² tests: skipped (with the reason) only when the real tau2 package is not importable.

The fixed upstream task files and the gold DB hashes ship with the project (``trace_envs/tau2/data/``), so the
tests that need them never skip for their absence."""

from __future__ import annotations

import pytest

from trace_envs.tau2.runtime import tau2_available

requires_tau2 = pytest.mark.skipif(
    not tau2_available(), reason="the real tau2 package is not installed (pip install 'trace-rl[tau2]')")
