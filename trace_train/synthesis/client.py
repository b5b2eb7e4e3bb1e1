"""The chat client the LLM env generators write with, built from ``synthesis.llm`` (shared by the retail-style and
the SWE generator)."""

from __future__ import annotations

from trace_envs.synthesis import SynthesisConfig
from trace_train.analysis.llm_client import ChatClient


def make_client(cfg: SynthesisConfig) -> ChatClient:
    """The configured endpoint's client; a clear error when ``synthesis.llm`` names no endpoint."""
    llm = cfg.llm
    if not llm.configured:
        raise ValueError("synthesis.generator=llm needs synthesis.llm.base_url=<an OpenAI-compatible endpoint> "
                         "(and synthesis.llm.model)")
    return ChatClient(base_url=llm.base_url or "", model=llm.model, api_key=llm.api_key,
                      temperature=llm.temperature, max_tokens=llm.max_tokens, timeout=llm.timeout_s,
                      retries=llm.retries)
