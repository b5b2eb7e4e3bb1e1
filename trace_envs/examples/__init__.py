"""Worked examples of bring-your-own envs (not registered on ``import trace_envs``; see the README)."""
