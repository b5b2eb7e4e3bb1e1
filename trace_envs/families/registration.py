"""Register the four capability families (``trace/<capability>-v0``) and the emitted envs listed in
``generated_envs/manifest.json`` (imported by ``trace_envs/__init__.py``)."""

from __future__ import annotations

import generated_envs
from trace_envs.families import FAMILIES
from trace_envs.registry import register_env

FAMILY_IDS = [register_env(capability, entry_point) for capability, entry_point in FAMILIES.items()]

generated_envs.load()
