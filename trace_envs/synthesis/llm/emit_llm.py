"""Emission of an accepted LLM-written env: its validated source, a registering wrapper and a manifest
row with its provenance (generator, model, prompt hashes, attempts, validation, calibration).

Files (atomic writes; an existing source with different content is never overwritten silently: the
previous one is kept under its own sha-suffixed name):
``<out>/<capability>_llm_source.py`` (the module as the LLM wrote it) and ``<out>/<capability>_llm.py``
(registers ``trace/<capability>-v0``, or ``trace/<capability>-llm-v0`` when a family or another env owns
that id).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import gymnasium

from trace_envs.atomic_io import write_text_atomic
from trace_envs.families import FAMILIES
from trace_envs.registry import NAMESPACE
from trace_envs.synthesis.emit import write_manifest_entry
from trace_envs.synthesis.llm.loader import ENTRY_POINT, sha256_text

logger = logging.getLogger(__name__)

_WRAPPER = '''"""Emitted by `trace-rl synthesize synthesis.generator=llm`: {capability} on {domain}.

Written by {model} (attempt {attempt}), validated in the sandbox and calibrated; the source is
{source} (sha256 {sha256}). Delete this file to unregister the env.
"""

from pathlib import Path

from trace_envs.registry import register_env

SOURCE = str(Path(__file__).with_name({source!r}))
ENV_ID = register_env({name!r}, {entry_point!r}, source=SOURCE, sha256={sha256!r}, domain={domain!r})
'''


def llm_env_name(capability: str) -> str:
    """``<capability>``, or ``<capability>-llm`` when a family or another env (a built-in such as
    ``trace/code_localization-v0``) owns ``trace/<capability>-v0``: an emitted env never replaces one."""
    spec = gymnasium.registry.get(f"{NAMESPACE}/{capability}-v0")
    taken = capability in FAMILIES or (spec is not None and spec.entry_point != ENTRY_POINT)
    return f"{capability}-llm" if taken else capability


def llm_env_id(capability: str) -> str:
    return f"{NAMESPACE}/{llm_env_name(capability)}-v0"


def emit_llm_env(capability: str, domain: str, source: str, out_dir: str | os.PathLike,
                 provenance: dict[str, Any]) -> dict[str, Any]:
    """Write the source, its wrapper and the manifest row; register the env in this process; returns the row."""
    out = Path(out_dir)
    sha = sha256_text(source)
    src_name, wrapper_name = f"{capability}_llm_source.py", f"{capability}_llm.py"
    src_path = out / src_name
    if src_path.exists() and sha256_text(src_path.read_text(encoding="utf-8")) != sha:
        kept = out / f"{capability}_llm_source.{sha256_text(src_path.read_text(encoding='utf-8'))[:12]}.py"
        src_path.replace(kept)
        logger.warning("%s held another module; kept as %s", src_path, kept)
    write_text_atomic(src_path, source)
    write_text_atomic(out / wrapper_name, _WRAPPER.format(
        capability=capability, domain=domain, model=provenance.get("model", "?"),
        attempt=provenance.get("accepted_attempt", "?"), source=src_name, sha256=sha,
        name=llm_env_name(capability), entry_point=ENTRY_POINT))
    entry = {"env_id": llm_env_id(capability), "capability": capability, "domain": domain, "module": wrapper_name,
             "source_module": src_name, "source_sha256": sha, "entry_point": ENTRY_POINT, "generator": "llm",
             "provenance": provenance, "calibration": provenance.get("calibration"),
             "passed_gate": bool(provenance.get("passed_gate", True))}
    return write_manifest_entry(out, entry)
