"""Drive a ``trace-rl`` command in-process, as the console script would, for CLI tests."""

from __future__ import annotations

import sys
from pathlib import Path

from trace_train import cli


def run_cli(command: str, *overrides: str, hydra_dir: str | Path, capsys) -> tuple[int, str, str]:
    """``trace-rl <command> <overrides>`` with Hydra's run dir at ``hydra_dir``; returns (exit code,
    stdout, stderr). ``sys.argv`` is restored whatever the command does."""
    code, argv = 0, list(sys.argv)
    try:
        cli.main([command, *overrides, f"hydra.run.dir={hydra_dir}"])
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return code, captured.out, captured.err
