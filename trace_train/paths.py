"""Where the project's non-Python assets live (Hydra configs, prompts, generated envs)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"
PROMPTS_DIR = REPO_ROOT / "prompts"
GENERATED_ENVS_DIR = REPO_ROOT / "generated_envs"
