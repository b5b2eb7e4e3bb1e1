"""LLM-written capability envs: the authoring API, the static and sandboxed validators, the loader
and the emission of accepted modules (see ``prompts/env_synthesis.md``)."""

from trace_envs.synthesis.llm.config import GENERATORS, LLMGeneratorConfig, ValidationLimits

__all__ = ["GENERATORS", "LLMGeneratorConfig", "ValidationLimits"]
