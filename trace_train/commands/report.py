"""``trace-rl report run_dir=<dir>``: (re)build ``<dir>/report.html`` and print its path."""

from __future__ import annotations

from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from trace_train.commands._app import command_app


@command_app("report")
def main(cfg: DictConfig) -> None:
    from rich.console import Console

    from trace_train.commands._validate import check_counts, existing_path, fail
    from trace_train.report import ViewerLimits, build_report
    from trace_train.report.build import check_out

    try:
        check_counts(cfg, {f"viewer.{key}": 1 for key in cfg.viewer})
        limits = ViewerLimits(**{k: int(v) for k, v in cfg.viewer.items()})
        existing_path(cfg.run_dir, "run_dir", "run directory", must_be="dir")
        out = Path(to_absolute_path(cfg.out)) if cfg.out else None
        check_out(out or Path(to_absolute_path(cfg.run_dir)) / "report.html")  # never over another file
    except (TypeError, ValueError) as exc:
        fail("report", str(exc))
    path = build_report(to_absolute_path(cfg.run_dir), out, limits)
    Console().print(f"[green]report written[/green] ({path.stat().st_size / 1024:.1f} KB):")
    print(path)


if __name__ == "__main__":
    main()
