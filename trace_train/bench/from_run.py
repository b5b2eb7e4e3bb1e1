"""The policies a pipeline run produced, read from its ``pipeline.json`` (data, not the pipeline's code).

``run_policies(run_dir)`` gives one spec per finished stage that made a model: the base the run used,
each capability adapter (``train/<capability>``), the composed model (``compose``) and each trained
baseline (``baselines/<name>``), each played as the run played it: the run's ``pipeline.policy`` (render_tools,
temperature, top_p, max_new_tokens, threads; kind hf or openai at its base_urls), recorded in ``pipeline.json``'s
``config``, unless overridden. A ``pipeline.json`` without that record (not written by ``trace-rl pipeline``) is
refused with a one-line error: benching its models with other settings would measure something else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_train.policies import PolicySpec, run_policy_fields

PIPELINE_FILE = "pipeline.json"


def _state(run_dir: Path) -> dict[str, Any]:
    path = run_dir / PIPELINE_FILE
    if not path.is_file():
        raise ValueError(f"run_dir={run_dir} has no {PIPELINE_FILE}; pass a trace-rl pipeline run directory")
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); the run directory is damaged") from exc
    if not isinstance(state, dict) or not isinstance(state.get("stages"), dict):
        raise ValueError(f"{path} has no 'stages' table")
    return state


def _done(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: record for name, record in state["stages"].items()
            if isinstance(record, dict) and record.get("status") == "done"}


def _run_policy(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """The run's ``pipeline.policy`` as its ``pipeline.json`` recorded it."""
    config = state.get("config")
    policy = config.get("policy") if isinstance(config, dict) else None
    if not isinstance(policy, dict):
        raise ValueError(f"{path} records no config.policy (the run's sampling settings), so its models cannot be "
                         "benched as the run played them; name them with +policies.<name>={...} instead")
    return policy


def run_policies(run_dir: str | Path, **overrides: Any) -> dict[str, PolicySpec]:
    """name -> PolicySpec for every model the run finished: ``base``, ``<capability>``, ``TRACE (composed)``,
    ``<baseline>``, each with the run's ``pipeline.policy`` settings; ``overrides`` (e.g. ``greedy=True``,
    ``threads=2``) apply to every spec."""
    run_dir = Path(run_dir)
    path = run_dir / PIPELINE_FILE
    state = _state(run_dir)
    stages = _done(state)
    model = (stages.get("bootstrap") or {}).get("outputs", {}).get("model")
    if not model:
        raise ValueError(f"{path}: the bootstrap stage is not done, so the run has no base model")
    policy = _run_policy(state, path)

    def spec(name: str, adapter: str | None = None, kind: str | None = None) -> PolicySpec:
        fields = run_policy_fields(policy, model, kind, where=f"{path}: config.policy")
        return PolicySpec.from_dict({**fields, "name": name, "adapter": adapter, **overrides},
                                    path=f"{path}: config.policy")

    policies = {"base": spec("base")}
    for name, record in sorted(stages.items()):
        outputs = record.get("outputs") or {}
        if name.startswith("train/") and outputs.get("adapter_dir"):
            policies[name.split("/", 1)[1]] = spec(name.split("/", 1)[1], outputs["adapter_dir"])
        elif name.startswith("baselines/") and outputs.get("adapter_dir"):
            policies[name.split("/", 1)[1]] = spec(name.split("/", 1)[1], outputs["adapter_dir"])
    composed = (stages.get("compose") or {}).get("outputs", {}).get("composed_dir")
    if composed:
        policies["TRACE (composed)"] = spec("TRACE (composed)", composed, kind="composed")
    return policies
