"""Policy specs -> rollout backends: the one place that turns a config's ``policy`` into something that plays.

Kinds: ``oracle`` and ``expert`` (scripted, retail-sim-style annotation required), ``hf`` (a local HF model,
optionally with a peft adapter directory in ``adapter``) and ``composed`` (the base in ``model`` with a saved
MoE composition directory in ``adapter``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_train.rollout.base import RolloutBackend, SamplingParams

KINDS = ("oracle", "expert", "hf", "composed")


@dataclass
class PolicySpec:
    kind: str = "oracle"
    name: str = ""
    model: str | None = None
    adapter: str | None = None
    knobs: dict[str, float] = field(default_factory=dict)
    render_tools: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    greedy: bool = False
    threads: int = 1
    max_batch: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PolicySpec":
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown policy keys {sorted(unknown)}")
        spec = cls(**data)
        if spec.kind not in KINDS:
            raise ValueError(f"unknown policy kind {spec.kind!r}; choose one of {KINDS}")
        if spec.kind in ("hf", "composed") and not spec.model:
            raise ValueError(f"a {spec.kind} policy needs model=<local HF directory or hub name>")
        if spec.kind == "composed" and not spec.adapter:
            raise ValueError("a composed policy needs adapter=<directory written by trace-rl compose>")
        spec.name = spec.name or (Path(spec.adapter).name if spec.adapter else spec.kind)
        return spec

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p,
                              max_new_tokens=self.max_new_tokens, greedy=self.greedy)


def build_backend(spec: PolicySpec) -> tuple[RolloutBackend, str | None]:
    """The backend that plays ``spec`` and the adapter name to pass to ``rollout``."""
    if spec.kind in ("oracle", "expert"):
        from trace_envs.retail_sim import ExpertKnobs, ScriptedExpert
        from trace_train.rollout.scripted import ScriptedRolloutBackend

        knobs = ExpertKnobs(**spec.knobs) if spec.kind == "expert" else ExpertKnobs()
        return ScriptedRolloutBackend(lambda seed: ScriptedExpert(knobs, seed=seed, name=spec.name)), None
    from trace_train.model import load_policy
    from trace_train.rollout.hf import HFRolloutBackend

    model, tokenizer = load_policy(spec.model)
    adapter = None
    if spec.kind == "composed":
        from trace_moe import ComposedModel

        model = ComposedModel.load(spec.adapter, model=model).model  # gated projections installed in place
    elif spec.adapter:
        from trace_train.grpo.lora import load_adapter

        adapter = spec.name
        model = load_adapter(model, spec.adapter, adapter)
    backend = HFRolloutBackend(model, tokenizer, threads=spec.threads, max_batch=spec.max_batch,
                               policy_name=spec.name, render_tools=spec.render_tools)
    return backend, adapter
