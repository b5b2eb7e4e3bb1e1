"""The policies a pipeline run produced, read from its ``pipeline.json`` (data, not the pipeline's code).

``run_policies(run_dir)`` gives one spec per finished stage that made a model: the base the run used,
each capability adapter (``train/<capability>``), the composed model (``compose``) and each trained
baseline (``baselines/<name>``), with the run's own sampling settings unless overridden.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_train.policies import PolicySpec

PIPELINE_FILE = "pipeline.json"


def _stages(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / PIPELINE_FILE
    if not path.is_file():
        raise ValueError(f"run_dir={run_dir} has no {PIPELINE_FILE}; pass a trace-rl pipeline run directory")
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); the run directory is damaged") from exc
    stages = state.get("stages") if isinstance(state, dict) else None
    if not isinstance(stages, dict):
        raise ValueError(f"{path} has no 'stages' table")
    return {name: record for name, record in stages.items()
            if isinstance(record, dict) and record.get("status") == "done"}


def run_policies(run_dir: str | Path, **overrides: Any) -> dict[str, PolicySpec]:
    """name -> PolicySpec for every model the run finished: ``base``, ``<capability>``, ``TRACE (composed)``,
    ``<baseline>``; ``overrides`` (e.g. ``greedy=True``, ``threads=2``) apply to every spec."""
    run_dir = Path(run_dir)
    stages = _stages(run_dir)
    model = (stages.get("bootstrap") or {}).get("outputs", {}).get("model")
    if not model:
        raise ValueError(f"{run_dir / PIPELINE_FILE}: the bootstrap stage is not done, so the run has no base model")

    def spec(name: str, adapter: str | None = None, kind: str = "hf") -> PolicySpec:
        return PolicySpec.from_dict({"kind": kind, "name": name, "model": model, "adapter": adapter, **overrides})

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
