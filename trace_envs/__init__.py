"""trace-rl envs. Importing this package registers every ``trace/`` Gymnasium id."""

from trace_envs.registry import register_env, trace_env_ids, unregister_env

register_env("retail-sim", "trace_envs.retail_sim.env:RetailSimEnv")

__all__ = ["register_env", "trace_env_ids", "unregister_env"]
