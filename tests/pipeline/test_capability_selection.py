"""Which selected capabilities the pipeline synthesizes envs (and so trains adapters) for."""

from trace_envs.synthesis.emit import SelectedCapability
from trace_train.pipeline.stages import capabilities_to_synthesize


def _caps(*names):
    return [SelectedCapability(name=n, description="") for n in names]


def test_a_capability_without_an_env_family_does_not_take_an_adapter_place():
    wanted = _caps("transfer_when_stuck", "multi_step_task_completion", "structured_data_reasoning",
                   "tool_calling_precision", "precondition_verification")
    chosen = [c.name for c in capabilities_to_synthesize(wanted, 4)]
    # all four buildable ones, in the analysis' order; the unbuildable one last (synthesize reports it)
    assert chosen == ["multi_step_task_completion", "structured_data_reasoning", "tool_calling_precision",
                      "precondition_verification", "transfer_when_stuck"]


def test_the_cap_keeps_the_analysis_order_among_buildable_capabilities():
    wanted = _caps("precondition_verification", "transfer_when_stuck", "tool_calling_precision",
                   "multi_step_task_completion")
    assert [c.name for c in capabilities_to_synthesize(wanted, 2)] == [
        "precondition_verification", "tool_calling_precision", "transfer_when_stuck"]
    assert [c.name for c in capabilities_to_synthesize(wanted, 0)] == ["transfer_when_stuck"]
