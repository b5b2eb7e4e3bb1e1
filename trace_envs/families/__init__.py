"""Capability env families: one Gymnasium env per capability, written once against the domain
interface (``trace_envs.domains``); ``domain=`` picks the domain (default retail-sim)."""

from trace_envs.families.experts import FamilyExpert, effective_knobs, play

# capability -> entry point of its family env class
FAMILIES: dict[str, str] = {
    "precondition_verification": "trace_envs.families.precondition:PreconditionVerificationEnv",
    "structured_data_reasoning": "trace_envs.families.structured:StructuredDataReasoningEnv",
    "multi_step_task_completion": "trace_envs.families.multi_step:MultiStepTaskCompletionEnv",
    "tool_calling_precision": "trace_envs.families.precision:ToolCallingPrecisionEnv",
}

__all__ = ["FAMILIES", "FamilyExpert", "effective_knobs", "play"]
