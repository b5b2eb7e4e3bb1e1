"""trace-rl envs. Importing this package registers every ``trace/`` Gymnasium id.

Optional targets (τ²-Bench, SWE-bench) register their ids without importing their packages; ``gym.make``
on them says which extra to install when it is missing.
"""

from trace_envs.registry import register_env, trace_env_ids, unregister_env

register_env("retail-sim", "trace_envs.retail_sim.env:RetailSimEnv")

# Capability families and the emitted envs of generated_envs/, then the benchmark wrappers.
import trace_envs.families.registration  # noqa: E402, F401
import trace_envs.swe.registration  # noqa: E402, F401
import trace_envs.tau2.registration  # noqa: E402, F401

__all__ = ["register_env", "trace_env_ids", "unregister_env"]
