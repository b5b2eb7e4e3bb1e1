"""Calibration (paper §3.4) and emission of capability envs into ``generated_envs/``."""

from trace_envs.synthesis.calibrate import (
    CalibrationStats,
    Collector,
    SearchResult,
    Trial,
    calibrate_env,
    expert_collector,
    gate_failures,
    group_statistics,
    pass_at_k,
    scripted_collector,
    scripted_policy_factory,
    search_knobs,
)
from trace_envs.synthesis.config import CalibrationGate, PolicyConfig, SearchConfig, SynthesisConfig
from trace_envs.synthesis.emit import SelectedCapability, SynthesisReport, emit, read_selected, synthesize

__all__ = [
    "CalibrationStats", "Collector", "CalibrationGate", "PolicyConfig", "SearchConfig", "SearchResult",
    "SelectedCapability", "SynthesisConfig", "SynthesisReport", "Trial", "calibrate_env", "emit", "expert_collector",
    "gate_failures", "group_statistics", "pass_at_k", "read_selected", "scripted_collector",
    "scripted_policy_factory", "search_knobs", "synthesize",
]
