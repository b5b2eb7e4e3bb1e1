"""The env-synthesis prompt: ``prompts/env_synthesis.md`` filled with the capability, the target's
tools, policy and DB shape, and a few failed trajectories lacking the capability."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from trace_envs.domains import get_domain
from trace_envs.records import TrajectoryRecord
from trace_envs.synthesis.emit import SelectedCapability
from trace_envs.synthesis.llm.fenced import longest_fenced_block
from trace_train.paths import PROMPTS_DIR

SYSTEM = ("You are an expert Python engineer who writes reinforcement-learning environments for tool-use agents. "
          "Answer with one complete Python module in a fenced ```python block.")
MAX_EXAMPLE_CHARS = 3000


def default_prompt_path() -> Path:
    return PROMPTS_DIR / "env_synthesis.md"


def _stats(cap: SelectedCapability) -> str:
    parts = [f"{k} = {v:.3f}" if isinstance(v, float) else f"{k} = {v}"
             for k, v in (("coverage", cap.mean_cov), ("delta", cap.mean_delta), ("runs passed", cap.n_runs_passed))
             if v is not None]
    return ", ".join(parts) or "no statistics given"


def _db_example(domain: str, limit: int = 2500) -> str:
    d = get_domain(domain)
    db = d.world_db(d.new_world(np.random.default_rng(0)))
    sample = {table: dict(list(rows.items())[:1]) if isinstance(rows, dict) else rows for table, rows in db.items()}
    return json.dumps(sample, indent=1)[:limit]


def _trajectory_text(record: TrajectoryRecord) -> str:
    lines = [f"### {record.episode_id} (reward {record.reward}, {record.termination})"]
    for m in record.messages:
        content = str(m.get("content") or "")
        calls = m.get("tool_calls") or []
        if calls:
            content += " " + " ".join(json.dumps(c.get("function", c)) for c in calls)
        lines.append(f"{m.get('role')}: {content.strip()}")
    return "\n".join(lines)[:MAX_EXAMPLE_CHARS]


def failed_examples(cap: SelectedCapability, records: list[TrajectoryRecord], n: int) -> list[TrajectoryRecord]:
    """Up to ``n`` failed trajectories: the analysis' examples of the capability first, then other failures."""
    failed = [r for r in records if not r.success]
    wanted = set(cap.example_failed_ids)
    chosen = [r for r in failed if r.episode_id in wanted]
    chosen += [r for r in failed if r.episode_id not in wanted]
    return chosen[:n]


def build_messages(cap: SelectedCapability, domain: str, tools: list[dict[str, Any]],
                   records: list[TrajectoryRecord], n_examples: int, template_path: str | Path | None = None
                   ) -> list[dict[str, str]]:
    """The first request to the generator."""
    template = Path(template_path or default_prompt_path()).read_text(encoding="utf-8")
    examples = failed_examples(cap, records, n_examples)
    fields = {
        "capability": cap.name, "description": cap.description or "(no description)", "stats": _stats(cap),
        "domain": domain, "policy": get_domain(domain).policy, "tools": json.dumps(tools, indent=1),
        "db_example": _db_example(domain),
        "failed_trajectories": "\n\n".join(_trajectory_text(r) for r in examples) or "(none available)",
    }
    return fill_messages(SYSTEM, template, fields)


def fill_messages(system: str, template: str, fields: dict[str, Any]) -> list[dict[str, str]]:
    """The system message and the user message ``template`` with every ``{{key}}`` replaced by its field."""
    text = template
    for key, value in fields.items():
        text = text.replace("{{" + key + "}}", str(value))
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def retry_message(feedback: str) -> dict[str, str]:
    return {"role": "user", "content": feedback + "\n\nFix it and answer with the complete corrected module in one "
                                                  "fenced ```python block."}


def prompt_hash(messages: list[dict[str, str]]) -> str:
    """sha256 of the conversation (a lone surrogate an earlier answer held is hashed as its code point)."""
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def extract_module(answer: str) -> str:
    """The (longest) ```python block of ``answer``; ``ValueError`` when there is none."""
    block = longest_fenced_block(answer, ("python", "py", ""))
    if block is None:
        raise ValueError("the answer holds no fenced ```python block")
    return block.strip("\n") + "\n"
