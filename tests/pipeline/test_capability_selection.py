"""Which selected capabilities the pipeline synthesizes envs (and so trains adapters) for."""

from trace_train.pipeline.stages import capabilities_to_synthesize


def test_a_capability_without_an_env_family_does_not_take_an_adapter_place():
    selected = ["transfer_when_stuck", "multi_step_task_completion", "structured_data_reasoning",
                "tool_calling_precision", "precondition_verification"]
    # all four buildable ones, in the analysis' order; the unbuildable one last (synthesize reports it)
    assert capabilities_to_synthesize(selected, 4) == [
        "multi_step_task_completion", "structured_data_reasoning", "tool_calling_precision",
        "precondition_verification", "transfer_when_stuck"]


def test_the_cap_keeps_the_analysis_order_among_buildable_capabilities():
    selected = ["precondition_verification", "transfer_when_stuck", "tool_calling_precision",
                "multi_step_task_completion"]
    assert capabilities_to_synthesize(selected, 2) == [
        "precondition_verification", "tool_calling_precision", "transfer_when_stuck"]
    assert capabilities_to_synthesize(selected, 0) == ["transfer_when_stuck"]
