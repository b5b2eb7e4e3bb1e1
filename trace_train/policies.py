"""Policy specs -> rollout backends: the one place that turns a config's ``policy`` into something that plays.

Kinds: ``oracle`` and ``expert`` (scripted, retail-sim-style annotation required), ``gold`` (τ² gold replay),
``hf`` (a local HF model, optionally with a peft adapter directory in ``adapter``), ``composed``
(the base in ``model`` with a saved MoE composition directory in ``adapter``), ``task_router`` (the same
``model`` + ``adapter``, each episode routed once to one adapter by the base model classifying its first user
message against the capabilities' descriptions: ``route_descriptions`` or the composition's saved ones; with
``route_corpus``, a JSON file ``{capability: [solved request, ...]}``, the nearest solved requests narrow the
candidates first; see ``trace_train.rollout.task_routed``) and
``openai`` (OpenAI-compatible servers such as vLLM at
``base_urls``, serving ``served_model``; ``model`` is the local directory of the served model's tokenizer; an
``adapter`` directory is loaded onto the servers; ``server`` holds ``OpenAIRolloutBackend`` options such as
``routing``, ``timeout``, ``retries``, ``backoff``, ``max_concurrency``, ``api_key``, ``load_inplace``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trace_envs.config_builder import build
from trace_train.rollout.base import RolloutBackend, SamplingParams

KINDS = ("oracle", "expert", "gold", "hf", "composed", "task_router", "openai")
SCRIPTED_KINDS = ("oracle", "expert", "gold")  # play from the env's task annotation, no model


@dataclass
class PolicySpec:
    kind: str = "oracle"
    name: str = ""
    model: str | None = None
    adapter: str | None = None
    knobs: dict[str, float] = field(default_factory=dict)
    render_tools: bool = False
    system_suffix: str = ""  # appended to the env's system prompt (e.g. capability descriptions)
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    greedy: bool = False
    threads: int = 1
    max_batch: int | None = None
    base_urls: list[str] = field(default_factory=list)  # openai: e.g. ["http://127.0.0.1:8000/v1"]
    served_model: str | None = None  # openai: the server's base model name (default: ``model``)
    server: dict[str, Any] = field(default_factory=dict)  # openai: OpenAIRolloutBackend options
    route_descriptions: dict[str, str] = field(default_factory=dict)  # task_router: adapter name -> description
    route_corpus: str | None = None  # task_router: retrieval corpus file (trace_moe.retrieval_router)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "policy") -> "PolicySpec":
        """Build strictly (an unknown or mistyped key fails with its path, e.g. ``policies.base.temprature``)
        and check that the kind has what it needs."""
        if "route_descriptions" in data and data["route_descriptions"] is None:  # the task_router group's default
            data = {**data, "route_descriptions": {}}
        spec = build(cls, data, path)
        if spec.kind not in KINDS:
            raise ValueError(f"{path}.kind: unknown policy kind {spec.kind!r}; choose one of {KINDS}")
        if spec.kind in ("hf", "composed", "task_router", "openai") and not spec.model:
            raise ValueError(f"a {spec.kind} policy needs model=<local HF directory or hub name>")
        if spec.kind == "openai" and not spec.base_urls:
            raise ValueError("an openai policy needs base_urls=[http://host:port/v1, ...]")
        if spec.kind == "composed" and not spec.adapter:
            raise ValueError("a composed policy needs adapter=<directory written by trace-rl compose>")
        if spec.kind == "task_router" and not spec.adapter:
            raise ValueError("a task_router policy needs adapter=<directory written by trace-rl compose>")
        if spec.kind == "openai":
            check_server_options(spec.server, f"{path}.server")
        for key in ("route_descriptions", "route_corpus"):
            if getattr(spec, key) and spec.kind != "task_router":
                raise ValueError(f"{path}.{key} is only read by a task_router policy, not {spec.kind}")
        spec.name = spec.name or (Path(spec.adapter).name if spec.adapter else spec.kind)
        return spec

    def hash_part(self) -> dict[str, Any]:
        """The spec as stage hashes see it: ``route_corpus`` only when set, so specs made before it existed keep
        their hashes."""
        part = asdict(self)
        if part["route_corpus"] is None:
            part.pop("route_corpus")
        return part

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p,
                              max_new_tokens=self.max_new_tokens, greedy=self.greedy)


# A pipeline's ``pipeline.policy`` (``trace_train.pipeline.config.PolicyStageConfig``): the sampling keys every
# model policy it plays carries, and the backend keys (absent from runs made before ``pipeline.policy.kind``
# existed, which played in-process: hf).
RUN_POLICY_KEYS = ("render_tools", "temperature", "top_p", "max_new_tokens", "threads")
RUN_BACKEND_KEYS = ("kind", "base_urls", "served_model", "server")


def run_policy_fields(policy: Mapping[str, Any], model: str, kind: str | None = None,
                      where: str = "pipeline.policy") -> dict[str, Any]:
    """The :class:`PolicySpec` fields of a pipeline's model policy over ``model``, from its ``pipeline.policy``
    settings ``policy`` (as a mapping: the config's, or the one its ``pipeline.json`` recorded): the sampling keys,
    and ``policy['kind']`` (hf, or openai at ``base_urls`` serving ``served_model``, default ``model``, with the
    ``server`` options) unless ``kind`` is given (``composed``, ``task_router``: in-process). ``ValueError`` (one
    line, naming ``where``) on the keys ``policy`` lacks; without the backend keys it is hf (runs made before they
    existed played in-process)."""
    missing = [key for key in RUN_POLICY_KEYS if key not in policy]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    kind = kind or policy.get("kind") or "hf"
    fields = {"kind": kind, "model": model, **{key: policy[key] for key in RUN_POLICY_KEYS}}
    if kind == "openai":
        fields.update(base_urls=list(policy.get("base_urls") or []), served_model=policy.get("served_model") or model,
                      server=dict(policy.get("server") or {}))
    return fields


# ``server`` keys of an openai policy: the OpenAIRolloutBackend options a config may set
SERVER_OPTIONS = ("routing", "timeout", "retries", "backoff", "max_concurrency", "api_key", "load_inplace",
                  "max_turns", "max_context")


def check_server_options(server: Mapping[str, Any], path: str = "policy.server") -> None:
    """An openai policy's ``server`` options: known keys, sane values; ``ValueError`` (one line) naming
    ``<path>.<key>`` otherwise (a bad value would only fail mid-run, at the first retry). ``routing`` is
    checked by the backend itself, before any episode."""
    from trace_envs.llm_http import client_options_problem

    unknown = sorted(set(server) - set(SERVER_OPTIONS))
    if unknown:
        raise ValueError(f"{path}.{unknown[0]}: unknown server option; the options are {', '.join(SERVER_OPTIONS)}")
    defaults = {"timeout": 300.0, "retries": 3, "backoff": 1.0}
    problem = client_options_problem(*(server.get(k, d) for k, d in defaults.items()))
    if problem:
        raise ValueError(f"{path}.{problem}")
    for key, minimum in (("max_concurrency", 1), ("max_turns", 1), ("max_context", 2)):
        value = server.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
            raise ValueError(f"{path}.{key} must be an integer >= {minimum}, got {value!r}")
    for key, kind in (("api_key", str), ("load_inplace", bool)):
        if key in server and not isinstance(server[key], kind):
            raise ValueError(f"{path}.{key} must be a {kind.__name__}, got {server[key]!r}")


def check_policy_env(spec: PolicySpec, env_id: str, env_kwargs: dict[str, Any] | None = None, seed: int = 0) -> None:
    """A scripted policy needs the task annotation it reads at reset: ``ValueError`` (one line) when
    ``env_id``'s reset info lacks it. Model policies are not checked (no env is made)."""
    if spec.kind not in SCRIPTED_KINDS:
        return
    import gymnasium as gym

    if spec.kind == "gold":
        from trace_envs.tau2.policies import gold_annotation_problem as problem_of
    else:
        from trace_envs.retail_sim.experts import task_annotation_problem as problem_of
    env = gym.make(env_id, **(env_kwargs or {}))
    try:
        _, info = env.reset(seed=seed)
    finally:
        env.close()
    problem = problem_of(info)
    if problem is not None:
        raise ValueError(f"policy {spec.name} (kind {spec.kind}) cannot play {env_id}: {problem}; "
                         f"play it with a model policy (policy=hf or policy=openai)")


def build_backend(spec: PolicySpec) -> tuple[RolloutBackend, str | None]:
    """The backend that plays ``spec`` and the adapter name to pass to ``rollout``."""
    if spec.kind == "gold":
        from trace_envs.tau2.policies import GoldScriptedPolicy
        from trace_train.rollout.scripted import ScriptedRolloutBackend

        return ScriptedRolloutBackend(lambda seed: GoldScriptedPolicy(name=spec.name)), None
    if spec.kind in ("oracle", "expert"):
        from trace_envs.retail_sim import ExpertKnobs, ScriptedExpert
        from trace_train.rollout.scripted import ScriptedRolloutBackend

        knobs = ExpertKnobs(**spec.knobs) if spec.kind == "expert" else ExpertKnobs()
        return ScriptedRolloutBackend(lambda seed: ScriptedExpert(knobs, seed=seed, name=spec.name)), None
    if spec.kind == "openai":
        return _openai_backend(spec)
    if spec.kind == "task_router":
        from trace_train.rollout.task_routed import build_task_routed

        return build_task_routed(spec.model, spec.adapter, spec.route_descriptions or None,
                                 route_corpus=spec.route_corpus, threads=spec.threads,
                                 max_batch=spec.max_batch, policy_name=spec.name, render_tools=spec.render_tools,
                                 system_suffix=spec.system_suffix), None
    from trace_train.model import load_policy
    from trace_train.rollout.hf import HFRolloutBackend

    model, tokenizer = load_policy(spec.model)
    adapter = None
    if spec.kind == "composed":
        from trace_moe import ComposedModel
        from trace_moe.episode_router import composition_scope

        if composition_scope(spec.adapter) == "episode":  # moe.gate.scope=episode: one learned route per episode
            from trace_train.rollout.task_routed import build_episode_routed

            return build_episode_routed(spec.adapter, model, tokenizer, threads=spec.threads, max_batch=spec.max_batch,
                                        policy_name=spec.name, render_tools=spec.render_tools,
                                        system_suffix=spec.system_suffix), None
        model = ComposedModel.load(spec.adapter, model=model).model  # gated projections installed in place
    elif spec.adapter:
        from trace_train.grpo.lora import load_adapter

        adapter = spec.name
        model = load_adapter(model, spec.adapter, adapter)
    backend = HFRolloutBackend(model, tokenizer, threads=spec.threads, max_batch=spec.max_batch,
                               policy_name=spec.name, render_tools=spec.render_tools, system_suffix=spec.system_suffix)
    return backend, adapter


def _openai_backend(spec: PolicySpec) -> tuple[RolloutBackend, str | None]:
    from transformers import AutoTokenizer

    from trace_train.model import PolicyLoadError
    from trace_train.rollout.openai_backend import OpenAIRolloutBackend
    from trace_train.rollout.openai_lora import parse_version

    local = Path(spec.model).expanduser()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(local) if local.is_dir() else spec.model)
    except (OSError, ValueError) as exc:
        raise PolicyLoadError(f"could not load the tokenizer of {spec.model!r}: {exc}") from exc
    backend = OpenAIRolloutBackend(spec.base_urls, spec.served_model or spec.model, tokenizer,
                                   policy_name=spec.name, render_tools=spec.render_tools,
                                   system_suffix=spec.system_suffix, **spec.server)
    backend.check_server(adapters=bool(spec.adapter))
    adapter = None
    if spec.adapter:
        try:
            _, iteration = parse_version(spec.name, spec.adapter, None)
        except ValueError:
            iteration = 0
        adapter = backend.sync_adapter(spec.name, spec.adapter, iteration)
    return backend, adapter
