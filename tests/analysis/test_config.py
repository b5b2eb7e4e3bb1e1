"""The analysis config refuses thresholds and labeler settings that cannot mean anything."""

import math

import pytest

from trace_train.analysis.config import AnalysisConfig, LLMLabelerConfig


@pytest.mark.parametrize("kwargs,field", [
    ({"rho": 1.5}, "rho"), ({"rho": -0.1}, "rho"), ({"rho": math.nan}, "rho"),
    ({"delta": 5.0}, "delta"), ({"delta": -1.5}, "delta"), ({"delta": math.nan}, "delta"),
    ({"epsilon": -1.0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
])
def test_analysis_config_refuses_thresholds_out_of_range(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AnalysisConfig(**kwargs)


def test_analysis_config_keeps_the_edges_of_the_ranges():
    AnalysisConfig(rho=0.0, delta=-1.0, epsilon=0.0)
    AnalysisConfig(rho=1.0, delta=1.0)
    AnalysisConfig.from_dict({"rho": 0.1, "delta": 0.2, "epsilon": 1e-9})


@pytest.mark.parametrize("kwargs,field", [
    ({"batch_size": 0}, "batch_size"), ({"label_retries": -1}, "label_retries"),
    ({"max_candidates": 0}, "max_candidates"), ({"retries": -2}, "retries"),
])
def test_llm_labeler_config_refuses_counts_out_of_range(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LLMLabelerConfig(**kwargs)
    with pytest.raises(ValueError, match=f"analysis.llm.{field}"):
        AnalysisConfig.from_dict({"llm": kwargs})


def test_llm_labeler_config_keeps_the_smallest_valid_counts():
    LLMLabelerConfig(batch_size=1, label_retries=0, max_candidates=1, retries=0)
