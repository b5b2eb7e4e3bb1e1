"""Probes for the calculator example env, registered through ``register_env_probes`` (README example)."""

from trace_train.analysis.labels import Label
from trace_train.analysis.messages import tool_calls
from trace_train.analysis.probes import register_env_probes


def uses_calculator(record):
    """PRESENT when the agent called a calculator tool, LACKING when it answered without one."""
    return Label.PRESENT if tool_calls(record.messages) else Label.LACKING


CAPABILITIES = register_env_probes("calculator", ["my/calc-v0"], {
    "calculator_tool_use": ("computes with the multiply/add tools instead of guessing", uses_calculator),
})
