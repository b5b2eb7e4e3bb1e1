"""Procedural code-localization capability env (``trace/code_localization-v0``)."""
