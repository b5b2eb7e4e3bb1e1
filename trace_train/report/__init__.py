"""The static HTML report of a TRACE run directory (``trace-rl report run_dir=<dir>``)."""

from trace_train.report.build import build_report, render_report
from trace_train.report.loaders import RunData, load_run
from trace_train.report.viewer import ViewerLimits

__all__ = ["RunData", "ViewerLimits", "build_report", "load_run", "render_report"]
