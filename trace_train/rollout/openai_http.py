"""Re-export of :mod:`trace_envs.llm_http`, the one OpenAI-compatible JSON client (moved to the bottom so
that the τ² user in ``trace_envs`` uses the same retrying client as every other LLM role)."""

from trace_envs.llm_http import BadResponseError, JSONHTTPClient, ServerError  # noqa: F401

__all__ = ["BadResponseError", "JSONHTTPClient", "ServerError"]
