"""The report tests share one realistic run directory (built once per session from real code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.rundir import build_run_dir


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    return build_run_dir(tmp_path_factory.mktemp("report"))
