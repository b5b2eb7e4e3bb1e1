"""retail-sim: the built-in offline target shaped like τ²-Bench retail (the embedded default)."""

from trace_envs.retail_sim.env import RetailSimEnv
from trace_envs.retail_sim.experts import ExpertKnobs, ScriptedExpert, run_episode
from trace_envs.retail_sim.pools import atomic_vocabulary, entity_id_types
from trace_envs.retail_sim.scenario import CAPABILITIES, SPLITS, generate_scenario, split_seeds

ENV_ID = "trace/retail-sim-v0"

__all__ = [
    "CAPABILITIES",
    "ENV_ID",
    "SPLITS",
    "ExpertKnobs",
    "RetailSimEnv",
    "ScriptedExpert",
    "atomic_vocabulary",
    "entity_id_types",
    "generate_scenario",
    "run_episode",
    "split_seeds",
]
