"""Evaluation: pass rate / pass^k with intervals, per-capability breakdown, comparison tables."""

from trace_train.evaluation.metrics import PolicySummary, pass_hat_k, summarize, wilson_interval

__all__ = ["PolicySummary", "pass_hat_k", "summarize", "wilson_interval"]
