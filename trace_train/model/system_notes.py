"""Notes appended to an env's system prompt: the "prompted" baseline's capability descriptions.

One format for both places that write it: the prompted baseline (``trace_train.pipeline.stages``) and
the bootstrap, which shows the base such notes on a share of its episodes so that a longer system prompt
is not out of distribution for it (``BootstrapConfig.system_note_fraction``).
"""

from __future__ import annotations

from collections.abc import Sequence


def capability_note(described: Sequence[tuple[str, str]]) -> str:
    """``"\\nBe careful with:\\n- <name>: <description>"`` for each ``(name, description)``; ``""`` for none."""
    lines = [f"- {name.replace('_', ' ')}: {description or 'no description'}" for name, description in described]
    return "\nBe careful with:\n" + "\n".join(lines) if lines else ""
