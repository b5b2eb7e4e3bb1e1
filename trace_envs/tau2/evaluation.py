"""Reward = tau2's ``evaluate_simulation`` on a ``SimulationRun`` rebuilt from our transcript.

The transcript (OpenAI-format messages) becomes tau2 messages: the greeting and every agent text as
``AssistantMessage``, tool calls with their ``ToolMessage`` results, user turns as ``UserMessage``.
Protocol errors that never reached tau2 (malformed tool calls, an empty assistant turn and the
env's reply to it) are left out, exactly as tau2 would never have seen them.

NL_ASSERTION (retail at upstream HEAD): with a judge endpoint configured, tau2's own NL evaluator runs
against it (``EvaluationType.ALL_WITH_NL_ASSERTIONS``); without one, the task is evaluated with the
NL_ASSERTION component replaced by COMMUNICATE (DB + COMMUNICATE, the original τ² basis) and the
info says so (``nl_assertions: "skipped_no_judge"``), as tau2.md §7a advises.

A transcript tau2 cannot replay (its ``Environment.set_state`` raises ``ValueError``) scores 0, with the reason
in ``info["scoring_error"]`` and a logged warning, rather than raising from ``step()``.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from trace_envs.config_builder import build
from trace_envs.core.tool_env import Score
from trace_envs.tau2.runtime import evaluation_domain
from trace_envs.tau2.users import TRANSFER

logger = logging.getLogger(__name__)
_JUDGE_LOCK = threading.Lock()
_TERMINATIONS = {"user_stop": "user_stop", "transfer": "user_stop", "agent_stop": "agent_stop"}


@dataclass
class JudgeConfig:
    """An OpenAI-compatible endpoint for tau2's NL-assertion judge (litellm ``openai/<model>``)."""

    base_url: str
    model: str
    api_key: str = "EMPTY"
    temperature: float = 0.0

    @classmethod
    def from_any(cls, value: "JudgeConfig | dict[str, Any] | None", path: str = "judge") -> "JudgeConfig | None":
        """``None`` (no judge), ``value`` itself, or a mapping built strictly (an unknown or mistyped key, or a
        missing ``base_url``/``model``, is a :class:`~trace_envs.config_builder.ConfigError` naming it)."""
        return None if value is None else build(cls, value, path)


def to_tau2_messages(transcript: list[dict[str, Any]], transferred: bool = False) -> list[Any]:
    """OpenAI-format transcript (system prompt first) -> tau2 message objects."""
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    out: list[Any] = []
    skip_next_user = False
    called: set[str] = set()  # ids of the calls the last assistant turn made (their results go to tau2)
    for msg in transcript:
        role = msg.get("role")
        if role == "assistant":
            content = (msg.get("content") or "").strip() or None
            calls = [
                ToolCall(id=c["id"], name=c["function"]["name"], requestor="assistant",
                         arguments=json.loads(c["function"]["arguments"]))
                for c in msg.get("tool_calls") or []
            ]
            called = {c.id for c in calls}
            skip_next_user = content is None and not calls
            if skip_next_user:
                continue  # only malformed calls / empty: tau2 never saw this turn
            out.append(AssistantMessage(role="assistant", content=content, tool_calls=calls or None))
        elif role == "tool":
            # the env's own error messages (malformed or refused calls) answer no call tau2 saw; told apart by id,
            # not by name: an agent may call a tool named "invalid_tool_call" itself
            if msg.get("tool_call_id") not in called:
                continue
            out.append(ToolMessage(id=msg["tool_call_id"], role="tool", requestor="assistant",
                                   content=msg.get("content"), error=str(msg.get("content", "")).startswith("Error:")))
        elif role == "user":
            if skip_next_user:
                skip_next_user = False
                continue
            out.append(UserMessage(role="user", content=msg.get("content") or ""))
    if transferred:
        out.append(UserMessage(role="user", content=TRANSFER))
    return out


def _basis_without_nl(task: Any) -> tuple[Any, bool]:
    """(task to evaluate, whether NL_ASSERTION was replaced by COMMUNICATE)."""
    from tau2.data_model.tasks import RewardType

    criteria = task.evaluation_criteria
    if criteria is None or RewardType.NL_ASSERTION not in criteria.reward_basis:
        return task, False
    basis = [b for b in criteria.reward_basis if b != RewardType.NL_ASSERTION]
    if RewardType.COMMUNICATE not in basis:
        basis.append(RewardType.COMMUNICATE)
    patched = task.model_copy(deep=True)
    patched.evaluation_criteria.reward_basis = basis
    return patched, True


def _evaluate_with_judge(run: Any, task: Any, domain: str, judge: JudgeConfig) -> Any:
    import tau2.evaluator.evaluator_nl_assertions as nl
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    with _JUDGE_LOCK:  # tau2 reads the judge model from module constants
        saved = nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS
        nl.DEFAULT_LLM_NL_ASSERTIONS = f"openai/{judge.model}"
        nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS = {"api_base": judge.base_url, "api_key": judge.api_key,
                                             "temperature": judge.temperature}
        try:
            return evaluate_simulation(run, task, EvaluationType.ALL_WITH_NL_ASSERTIONS, solo_mode=False,
                                       domain=domain)
        finally:
            nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS = saved


def evaluate_transcript(task: Any, domain: str, transcript: list[dict[str, Any]], termination: str,
                        run_id: str, judge: JudgeConfig | None = None) -> Score:
    """Score a finished episode with tau2's evaluator; the breakdown and tau2's RewardInfo go to info."""
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    reason = TerminationReason(_TERMINATIONS.get(termination, "agent_error"))
    now = _dt.datetime.now().isoformat()
    eval_domain = evaluation_domain(domain)
    nl_status = "not_in_basis"
    try:
        run = SimulationRun(id=run_id, task_id=str(task.id), start_time=now, end_time=now, duration=0.0,
                            termination_reason=reason,
                            messages=to_tau2_messages(transcript, transferred=termination == "transfer"))
        if judge is not None and _basis_without_nl(task)[1]:
            reward_info = _evaluate_with_judge(run, task, eval_domain, judge)
            nl_status = "judged"
        else:
            eval_task, replaced = _basis_without_nl(task)
            reward_info = evaluate_simulation(run, eval_task, EvaluationType.ALL, solo_mode=False,
                                              domain=eval_domain)
            nl_status = "skipped_no_judge" if replaced else nl_status
    except ValueError as exc:  # tau2's replay (set_state) or its message models refuse the transcript
        note = f"{type(exc).__name__}: {str(exc)[:1000]}"
        logger.warning("τ² run %s cannot be scored, reward 0: %s", run_id, note)
        return Score(reward=0.0, success=False, info={"scoring_error": note, "tau2_termination": reason.value})
    breakdown = {str(getattr(k, "value", k)).lower(): float(v) for k, v in (reward_info.reward_breakdown or {}).items()}
    reward = float(reward_info.reward)
    info = {
        "tau2_reward_info": reward_info.model_dump(mode="json"),
        "tau2_termination": reason.value,
        "nl_assertions": nl_status,
        "reward_basis_used": [str(getattr(b, "value", b)) for b in (reward_info.reward_basis or [])],
    }
    return Score(reward=reward, success=abs(reward - 1.0) <= 1e-6, breakdown=breakdown, info=info)
