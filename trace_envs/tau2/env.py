"""``trace/tau2-<domain>-v0``: τ²-Bench airline/retail as thread-free ``ToolUseEnv`` episodes.

Built on tau2's own primitives: the domain environment (tools, policy, DB) from tau2's domain
module, every tool call executed by ``Environment.get_response`` (so errors are tau2's
``Error: ...`` tool messages), tau2's greeting and user stop tokens, and the reward from tau2's
``evaluate_simulation``. The message protocol, parsing, error counting and truncation are the env
core's (``trace_envs.core``), shared with every other trace-rl env.

Options: ``domain``; ``task_file`` ("bundled" | "head" | path); ``split`` ("train" | "test" |
"base") or ``task_ids``; ``user`` ("scripted" | "llm") with ``user_config``; ``judge`` (optional
NL-assertion judge endpoint); ``max_steps`` (agent turns) and ``max_errors`` (tool errors, tau2's
default 10); ``record_db_hash`` adds the end-state DB hash to the final info.
``reset(seed=s)`` picks the task with the env's ``np_random``; ``options={"task_id": "7"}`` pins one.
"""

from __future__ import annotations

from typing import Any

from trace_envs.core.parsing import ToolCall
from trace_envs.core.tool_env import Episode, Score, ToolUseEnv, UserReply
from trace_envs.core.tools import ToolBox, ToolResult, ToolSpec
from trace_envs.tau2.evaluation import JudgeConfig, evaluate_transcript
from trace_envs.tau2.runtime import (
    DOMAINS,
    INSTALL_HINT,
    Tau2NotInstalled,
    env_constructor,
    refuse_tau2_call,
    tau2_available,
)
from trace_envs.tau2.tasks import load_task_set
from trace_envs.tau2.users import GREETING, USER_KINDS, UserConfig, make_user


def agent_system_prompt(policy: str) -> str:
    """tau2's LLM-agent system prompt (``<instructions>`` + AGENT_INSTRUCTION + ``<policy>``)."""
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT

    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


class Tau2ToolBox(ToolBox):
    """The domain's tools in OpenAI format; calls go to tau2's ``Environment.get_response``.

    Arguments are not schema-checked here: tau2 executes whatever arrives, and unknown tools, missing
    or unexpected arguments come back as tau2's own ``Error: ...`` messages (counted as errors); the one
    call refused before it gets here is in ``Tau2Env.check_call``.
    """

    def __init__(self, environment: Any):
        self.environment = environment
        self._schemas = [t.openai_schema for t in environment.get_tools()]
        specs = [
            ToolSpec(name=s["function"]["name"], description=s["function"].get("description", ""),
                     parameters=s["function"]["parameters"], fn=_unused)
            for s in self._schemas
        ]
        super().__init__({spec.name: spec for spec in specs})
        self._counter = 0

    def schemas(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self._schemas]

    def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        from tau2.data_model.message import ToolCall

        self._counter += 1
        try:
            message = self.environment.get_response(
                ToolCall(id=f"t{self._counter}", name=name, arguments=args, requestor="assistant"))
        except Exception as exc:  # tau2 catches tool exceptions; this guards serialization quirks
            return ToolResult(f"Error: {type(exc).__name__}: {exc}", error=True)
        content = message.content if message.content is not None else ""
        return ToolResult(content, error=bool(message.error))


def _unused(**_: Any) -> Any:  # pragma: no cover - Tau2ToolBox.call never calls ToolSpec.fn
    raise RuntimeError("τ² tools run through tau2's Environment")


class Tau2Episode(Episode):
    """One τ² task: tau2 environment, the user, and tau2's evaluator at the end."""

    def __init__(self, domain: str, task: Any, task_source: str, user: Any, run_id: str,
                 judge: JudgeConfig | None, record_db_hash: bool = False):
        self.domain = domain
        self.task = task
        self.environment = env_constructor(domain)()
        state = task.initial_state
        if state is not None and state.message_history:
            raise NotImplementedError("τ² tasks with an initial message history are not supported")
        if state is not None:
            self.environment.set_state(state.initialization_data, state.initialization_actions, [])
        self.tools = Tau2ToolBox(self.environment)
        self.system_prompt = agent_system_prompt(self.environment.get_policy())
        self.user = user
        self.run_id = run_id
        self.judge = judge
        self.record_db_hash = record_db_hash
        criteria = task.evaluation_criteria
        self.task_info = {
            "benchmark": "tau2", "domain": domain, "task_id": str(task.id), "task_source": task_source,
            "reward_basis": [str(getattr(b, "value", b)) for b in (criteria.reward_basis if criteria else [])],
            "n_gold_actions": len(criteria.actions or []) if criteria else 0,
            "communicate_info": list(criteria.communicate_info or []) if criteria else [],
        }

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": GREETING},
                {"role": "user", "content": self.user.opening(GREETING)}]

    def user_reply(self, assistant_text: str) -> UserReply:
        return self.user.reply(assistant_text)

    def score(self, transcript: list[dict[str, Any]], termination: str) -> Score:
        score = evaluate_transcript(self.task, self.domain, transcript, termination, self.run_id, self.judge)
        if self.record_db_hash:
            score.info["end_db_hash"] = self.environment.get_db_hash()
        score.info["task_id"] = str(self.task.id)
        return score


class Tau2Env(ToolUseEnv):
    """τ²-Bench domain env (see module docstring)."""

    def __init__(self, domain: str = "airline", task_file: str = "bundled", split: str | None = "base",
                 task_ids: list[str] | None = None, user: str = "scripted",
                 user_config: UserConfig | dict[str, Any] | None = None,
                 judge: JudgeConfig | dict[str, Any] | None = None, max_steps: int = 50, max_errors: int = 10,
                 record_db_hash: bool = False, render_mode: str | None = None):
        if domain not in DOMAINS:
            raise ValueError(f"unknown τ² domain {domain!r}; supported: {DOMAINS}")
        if user not in USER_KINDS:
            raise ValueError(f"unknown τ² user {user!r}; use one of {', '.join(USER_KINDS)}")
        if isinstance(task_ids, (str, bytes)):  # a string would be read as one task id per character
            raise ValueError(f"task_ids must be a list of task ids, got the string {task_ids!r}")
        super().__init__(max_steps=max_steps, max_errors=max_errors, render_mode=render_mode)
        self.domain = domain
        self.task_file = task_file
        self.task_set = load_task_set(domain, task_file)
        self.task_pool = self.task_set.ids(split, task_ids)
        self.split = split
        self.user_kind = user
        # built (strictly) at construction, so a mistyped key fails when the env is made, not at the first reset
        self.user_config = UserConfig.from_any(user_config) if user_config is not None else None
        self.judge = JudgeConfig.from_any(judge)
        self.record_db_hash = record_db_hash
        self._seed: int | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._seed = seed
        return super().reset(seed=seed, options=options)

    def _new_episode(self, options: dict[str, Any] | None) -> Tau2Episode:
        options = options or {}
        if "task_id" in options:
            task_id = str(options["task_id"])
            if task_id not in self.task_set.tasks:
                raise KeyError(f"unknown {self.domain} task id {task_id!r}")
        else:
            task_id = self.task_pool[int(self.np_random.integers(len(self.task_pool)))]
        task = self.task_set.tasks[task_id]
        # an unseeded reset still gives an LLM user a seed, drawn from the env's own generator
        user_seed = self._seed if self._seed is not None else int(self.np_random.integers(2**31))
        user = make_user(self.user_kind, task, self.user_config, user_seed)
        run_id = f"tau2-{self.domain}-{task_id}-{self._seed}"
        return Tau2Episode(self.domain, task, self.task_set.source, user, run_id, self.judge, self.record_db_hash)

    def check_call(self, call: ToolCall) -> str | None:
        return refuse_tau2_call(call.name, call.arguments)

    @property
    def episode(self) -> Tau2Episode | None:
        return self._episode  # type: ignore[return-value]


def make_tau2_env(**kwargs: Any) -> Tau2Env:
    """Gymnasium entry point: a clear error when tau2 is not installed."""
    if not tau2_available():
        raise Tau2NotInstalled(INSTALL_HINT)
    return Tau2Env(**kwargs)

