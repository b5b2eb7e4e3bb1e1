"""τ² tests: skipped (with the reason) only when the real tau2 package is not importable."""

from __future__ import annotations

import pytest

from trace_envs.tau2.runtime import tau2_available
from trace_envs.tau2.tasks import reference_dir

requires_tau2 = pytest.mark.skipif(
    not tau2_available(), reason="the real tau2 package is not installed (pip install 'trace-rl[tau2]')")
requires_reference = pytest.mark.skipif(
    not (reference_dir() / "tau2-head-tasks").is_dir() or not (reference_dir() / "tau2_gold_db_hashes.json").is_file(),
    reason=f"shared reference files not found under {reference_dir()} (CI places ../shared beside the repo)")
