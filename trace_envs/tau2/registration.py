"""Register the τ²-Bench ids (no tau2 import: ``gym.make`` raises a clear error if it is missing).

* ``trace/tau2-airline-v0``, ``trace/tau2-retail-v0``: scripted user (deterministic, offline);
* ``trace/tau2-airline-llm-v0``, ``trace/tau2-retail-llm-v0``: LLM user over an OpenAI-compatible
  endpoint (``user_config={"base_url", "model", "temperature", "seed"}``), registered nondeterministic.
"""

from __future__ import annotations

from trace_envs.registry import register_env

ENTRY_POINT = "trace_envs.tau2.env:make_tau2_env"
TAU2_DOMAINS = ("airline", "retail")


def register_tau2_envs() -> list[str]:
    ids = []
    for domain in TAU2_DOMAINS:
        ids.append(register_env(f"tau2-{domain}", ENTRY_POINT, domain=domain, user="scripted"))
        ids.append(register_env(f"tau2-{domain}-llm", ENTRY_POINT, nondeterministic=True, domain=domain, user="llm"))
    return ids


TAU2_ENV_IDS = register_tau2_envs()
