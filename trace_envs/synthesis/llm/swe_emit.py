"""Emission of an accepted SWE scenario: a task in a swebench task repo, a registering wrapper, a manifest row.

Files: ``<out>/swe_scenarios/<capability>/tasks/llm__<capability>-<sha12>/`` (``task.yaml`` with the
scenario's provenance, ``tests.json``, ``problem_statement.md``, ``gold.patch``, ``test.patch``,
``eval.sh``, ``Dockerfile``, ``repo/``), ``<out>/swe_scenarios/<capability>/scenario_<sha12>.json`` (the
scenario as the LLM wrote it) and ``<out>/<capability>_swe.py``, our own wrapper that registers
``trace/<capability>-swe-v0``: the SWE env (``trace/swebench-v0``'s class, local backend) over that task
repo. Each accepted scenario adds a task (an existing one is never overwritten); the env draws among them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from trace_envs.atomic_io import publish_dir, write_text_atomic
from trace_envs.registry import NAMESPACE
from trace_envs.synthesis.emit import write_manifest_entry
from trace_envs.synthesis.llm.swe_scenario import SWEScenario
from trace_envs.synthesis.llm.swe_validate import write_scenario_task

logger = logging.getLogger(__name__)
SWE_ENTRY_POINT = "trace_envs.swe.env:SWEBenchEnv"

_WRAPPER = '''"""Emitted by the LLM env generator (SWE flavour): {capability} as SWE scenarios.

The tasks live in swe_scenarios/{capability}/ (a swebench task repo); each was validated in the SWE
local sandbox. Delete this file to unregister the env.
"""

from pathlib import Path

from trace_envs.registry import register_env

TASKS = str(Path(__file__).with_name("swe_scenarios") / {capability!r})
ENV_ID = register_env({name!r}, {entry_point!r}, dataset=TASKS, backend="local")
'''


def swe_env_id(capability: str) -> str:
    return f"{NAMESPACE}/{capability}-swe-v0"


def scenario_sha(scenario: SWEScenario) -> str:
    return hashlib.sha256(json.dumps(scenario.to_dict(), sort_keys=True).encode()).hexdigest()


def emit_swe_scenario(capability: str, scenario: SWEScenario, pass_to_pass: list[str], out_dir: str | os.PathLike,
                      provenance: dict[str, Any]) -> dict[str, Any]:
    """Write the task, the wrapper and the manifest row (the env's scenarios accumulate); returns the row."""
    out = Path(out_dir)
    sha = scenario_sha(scenario)
    repo = out / "swe_scenarios" / capability
    instance_id = f"llm__{capability}-{sha[:12]}"
    task_dir = repo / "tasks" / instance_id
    if (task_dir / "task.yaml").exists():  # published whole (below), or left by an earlier version
        logger.info("SWE scenario %s is already emitted; kept as it is", instance_id)
    else:  # in a temporary folder first: a kill mid-write leaves no half task that would count as emitted
        extra = {"provenance": json.loads(json.dumps(provenance, default=str))}
        publish_dir(task_dir, lambda tmp: write_scenario_task(scenario, repo, instance_id, pass_to_pass,
                                                              extra=extra, task_dir=tmp))
    write_text_atomic(repo / f"scenario_{sha[:12]}.json", json.dumps(scenario.to_dict(), indent=2) + "\n")
    wrapper = f"{capability}_swe.py"
    write_text_atomic(out / wrapper, _WRAPPER.format(capability=capability, name=f"{capability}-swe",
                                                     entry_point=SWE_ENTRY_POINT))
    env_id = swe_env_id(capability)
    manifest = out / "manifest.json"
    previous = next((e for e in (json.loads(manifest.read_text()).get("envs", []) if manifest.exists() else [])
                     if e.get("env_id") == env_id), {})
    scenarios = [s for s in previous.get("scenarios", []) if s.get("instance_id") != instance_id]
    scenarios.append({"instance_id": instance_id, "sha256": sha, "name": scenario.name,
                      "fail_to_pass": scenario.fail_to_pass, "pass_to_pass": pass_to_pass, "provenance": provenance})
    entry = {"env_id": env_id, "capability": capability, "domain": "swe", "module": wrapper,
             "entry_point": SWE_ENTRY_POINT, "generator": "llm-swe", "task_repo": str(repo.relative_to(out)),
             "scenarios": scenarios, "provenance": provenance, "calibration": None, "passed_gate": None}
    return write_manifest_entry(out, entry)
