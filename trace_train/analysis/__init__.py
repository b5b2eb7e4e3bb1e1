"""Contrastive capability analysis (paper §2): labels, probes, LLM labeler, aggregation, sweeps."""

from trace_train.analysis.aggregate import AnalysisResult, Thresholds, aggregate, write_selected
from trace_train.analysis.labels import Capability, Label, LabelRun
from trace_train.analysis.probes import ProgrammaticLabeler, capabilities_for, register_probe

__all__ = [
    "AnalysisResult", "Capability", "Label", "LabelRun", "ProgrammaticLabeler", "Thresholds",
    "aggregate", "capabilities_for", "register_probe", "write_selected",
]
