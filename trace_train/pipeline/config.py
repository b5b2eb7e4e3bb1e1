"""Typed pipeline config; mirrors the ``pipeline`` key of ``conf/pipeline.yaml`` one to one.

The pipeline composes the stage groups (``bootstrap``, ``analysis``, ``synthesis``, ``grpo``, ``moe``) rather than
restating them: ``trace-rl pipeline grpo.group_size=4`` is the GRPO group size of every adapter it trains."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_envs.config_builder import build
from trace_moe.config import MoEConfig

logger = logging.getLogger(__name__)

__all__ = ["MoEConfig", "PipelineConfig", "PipelineConfigs", "check_force", "is_forced"]

BASELINES = ("grpo_target", "grpo_target_4x", "mixture", "sft", "prompted")
TRAINED_BASELINES = ("grpo_target", "grpo_target_4x", "mixture", "sft")
STAGES = ("bootstrap", "rollouts", "analysis", "synthesis", "train", "compose", "baselines", "eval", "routing",
          "replication", "report")
GATE_GRPO_ROWS = ("target", "mixture")
# GRPO keys a trained baseline or one capability's adapter may not override: every adapter's rollout budget is the
# grpo group's and a trained baseline's is TRACE's by design, the seed is the run's
FIXED_BASELINE_GRPO_KEYS = ("iterations", "groups_per_iter", "group_size", "seed")


@dataclass
class RolloutStageConfig:
    episodes: int = 200
    split: str = "train"
    offset: int = 500_000  # train seeds no GRPO run is likely to revisit (GRPO seeds are hashed)
    batch_episodes: int = 32


@dataclass
class TrainStageConfig:
    """Which adapters the pipeline trains; the GRPO counts (iterations, groups, G) are the ``grpo`` group's."""

    max_capabilities: int = 4


@dataclass
class ComposeStageConfig:
    """Whether and on what the gates train; the gate and optimiser settings are the ``moe`` group's."""

    enabled: bool = True
    max_examples_per_capability: int = 48


@dataclass
class EvalStageConfig:
    episodes: int = 200
    split: str = "test"
    trials: int = 1
    curve_episodes: int = 100  # per GRPO-on-target checkpoint on the sample-efficiency curve (0: its final point only)
    batch_episodes: int = 32
    greedy: bool = False  # evaluate every policy with greedy decoding (rollouts and training still sample)


@dataclass
class ReportStageConfig:
    """What the pipeline adds for the report: ``routing_sample`` held-out TRACE trajectories whose per-token
    routing is traced into ``routing/routing_trace.json`` (0: none)."""

    routing_sample: int = 6


@dataclass
class ReplicationStageConfig:
    """The miniature replication's extra rows (``preset=replication``); everything off by default.

    ``extra_seeds``: run seeds (``grpo.seed``) every trained row (adapters, gates, trained baselines) is trained with
    besides the pipeline's own run, as ``<stage>@s<seed>`` stages; the tables report mean and spread over all.
    ``top_k``: the routing ablation (gates trained and run top-k). ``scale``: TRACE over the analysis' first k
    adapters beside the prompted base with the same k descriptions. ``task_router``: the task-level router over the
    adapters; ``task_router_corpus``: it retrieves over the adapters' solved training requests first (the paper's
    final configs) rather than classifying zero-shot alone. ``gate_grpo``: gates trained by gate-only GRPO on the
    ``target`` and/or the capability envs' ``mixture``. ``trace_curve``: TRACE composed from each adapter
    checkpoint (its sample-efficiency curve).
    ``episode_router``: the adapters composed under the learned episode-level router (``moe.gate.scope=episode``),
    fitted to the target's routing targets (``moe.routing``) as the quick preset's TRACE is, beside the token-level
    gates."""

    extra_seeds: list[int] = field(default_factory=list)
    top_k: list[int] = field(default_factory=list)
    scale: list[int] = field(default_factory=list)
    task_router: bool = False
    task_router_corpus: bool = True
    gate_grpo: list[str] = field(default_factory=list)
    trace_curve: bool = False
    episode_router: bool = False

    @property
    def enabled(self) -> bool:
        return (bool(self.extra_seeds) or bool(self.top_k or self.scale or self.gate_grpo) or self.task_router
                or self.trace_curve or self.episode_router)


@dataclass
class PolicyStageConfig:
    """The policy of rollouts, calibration and evaluation: ``kind=hf`` loads ``model`` in-process; ``kind=openai``
    plays through OpenAI-compatible servers (vLLM) at ``base_urls`` serving ``served_model`` (default: the base
    model), adapters hot-loaded there (``trace_train.rollout.openai_lora``); ``server``: backend options."""

    kind: str = "hf"
    base_urls: list[str] = field(default_factory=list)
    served_model: str | None = None
    server: dict[str, Any] = field(default_factory=list)
    render_tools: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    threads: int = 1


@dataclass
class TargetKwargs:
    """One target's ``gym.make`` kwargs, as a list row of ``pipeline.target_env_kwargs``."""

    id: str
    kwargs: dict[str, Any] = field(default_factory=list)


@dataclass
class PipelineConfig:
    target_env: str | list[str] = "trace/retail-sim-v0"  # one env id, or several (trained and evaluated together)
    # per-target gym.make kwargs: {<id>: {...}} or [{id, kwargs}], e.g. the τ² LLM user's user_config
    target_env_kwargs: dict[str, dict[str, Any]] | list[TargetKwargs] = field(default_factory=list)
    run_dir: str = "runs/quick"
    force: list[str] = field(default_factory=list)
    base_model: str | None = None  # an HF directory; None: bootstrap (shipped checkpoint if its hash matches)
    shipped_checkpoint: str | None = "retail-sim-tiny"  # a checkpoint shipped with trace-rl, or an absolute dir
    labeler: str = "programmatic"
    capabilities: list[str] | None = None  # None: the analysis' selection; else train exactly these
    baselines: list[str] = field(default_factory=lambda: ["grpo_target"])
    # per trained baseline, grpo keys it trains with instead of the grpo group's, e.g. {sft: {ppo_epochs: 1}}
    baseline_grpo: dict[str, dict[str, Any]] = field(default_factory=dict)
    # per capability, grpo keys its adapter trains with instead, e.g. {precondition_verification: {lora:
    # {target_modules: [layers.1.self_attn.q_proj, ...]}}} (the composer adapts the union of the adapters' modules)
    capability_grpo: dict[str, dict[str, Any]] = field(default_factory=dict)
    rollouts: RolloutStageConfig = field(default_factory=RolloutStageConfig)
    train: TrainStageConfig = field(default_factory=TrainStageConfig)
    compose: ComposeStageConfig = field(default_factory=ComposeStageConfig)
    eval: EvalStageConfig = field(default_factory=EvalStageConfig)
    policy: PolicyStageConfig = field(default_factory=PolicyStageConfig)
    report: ReportStageConfig = field(default_factory=ReportStageConfig)
    replication: ReplicationStageConfig = field(default_factory=ReplicationStageConfig)
    # processes that run independent stages at once (adapters and trained baselines, evaluations, ablation rows),
    # each on one torch thread; an execution setting, so no stage hash sees it (trace_train.workers)
    workers: int = 1

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "pipeline") -> "PipelineConfig":
        """Build (strictly: unknown or mistyped keys fail with their path) and validate."""
        cfg = build(cls, data, path)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise ValueError(f"pipeline.baselines: unknown baselines {bad}; choose from {list(BASELINES)}")
        check_force(self.force)
        self._validate_baseline_grpo()
        self._validate_capability_grpo()
        if self.report.routing_sample < 0:
            raise ValueError(f"pipeline.report.routing_sample must be >= 0, got {self.report.routing_sample}")
        if self.labeler not in ("programmatic", "llm"):
            raise ValueError(f"pipeline.labeler must be 'programmatic' or 'llm', got {self.labeler!r}")
        if self.policy.kind not in ("hf", "openai"):
            raise ValueError(f"pipeline.policy.kind must be 'hf' or 'openai', got {self.policy.kind!r}")
        if self.policy.kind == "openai" and not self.policy.base_urls:
            raise ValueError("pipeline.policy.kind=openai needs pipeline.policy.base_urls=[http://host:port/v1, ...]")
        targets = self.targets
        if not targets:
            raise ValueError("pipeline.target_env: give an env id or a non-empty list of env ids")
        if len(set(targets)) != len(targets):
            raise ValueError(f"pipeline.target_env: duplicate env ids in {targets}")
        kwargs = self.kwargs_by_target(only_targets=False)
        unused = sorted(set(kwargs) - set(targets))
        if unused:  # e.g. the paper preset's τ² kwargs under pipeline.target_env=trace/retail-sim-v0
            logger.warning("pipeline.target_env_kwargs: %s not in pipeline.target_env %s; ignored", unused, targets)
        for env_id, kw in kwargs.items():
            if is_tau2(env_id) and "split" in kw:
                raise ValueError(f"pipeline.target_env_kwargs.{env_id}.split: the τ² task split follows "
                                 "pipeline.rollouts.split (train) and pipeline.eval.split (test); remove it")
        if self.workers < 1:
            raise ValueError(f"pipeline.workers must be >= 1, got {self.workers}")
        if self.train.max_capabilities < 1:
            raise ValueError(f"pipeline.train.max_capabilities must be >= 1, got {self.train.max_capabilities}")
        self._validate_splits()
        if self.policy.temperature <= 0:
            raise ValueError(f"pipeline.policy.temperature must be > 0, got {self.policy.temperature} (greedy "
                             "decoding is pipeline.eval.greedy)")
        self._validate_replication()

    def _validate_splits(self) -> None:
        """Every split the stages play exists and holds their seeds (a bad one failed after every adapter trained)."""
        from trace_envs.splits import SPLITS

        r, e = self.rollouts, self.eval
        for key, split, first, count in (("rollouts", r.split, r.offset, r.episodes),
                                         ("eval", e.split, 0, max(e.episodes, e.curve_episodes))):
            if split not in SPLITS:
                raise ValueError(f"pipeline.{key}.split: unknown split {split!r}; choose one of {sorted(SPLITS)}")
            if first + count > len(SPLITS[split]):
                raise ValueError(f"pipeline.{key}: {count} seeds from {first} do not fit the {split!r} split "
                                 f"({len(SPLITS[split])} seeds)")

    def _validate_baseline_grpo(self) -> None:
        for name, override in self.baseline_grpo.items():
            if name not in TRAINED_BASELINES:
                raise ValueError(f"pipeline.baseline_grpo.{name}: not a trained baseline; choose from "
                                 f"{list(TRAINED_BASELINES)}")
            fixed = sorted(set(override) & set(FIXED_BASELINE_GRPO_KEYS))
            if fixed:
                raise ValueError(f"pipeline.baseline_grpo.{name}: {fixed} cannot differ per baseline (the rollout "
                                 "budget is TRACE's, the seed the run's); set them in the grpo group")
            if name not in self.baselines:
                logger.warning("pipeline.baseline_grpo.%s: %s is not in pipeline.baselines %s; ignored",
                               name, name, self.baselines)

    def _validate_capability_grpo(self) -> None:
        for name, override in self.capability_grpo.items():
            fixed = sorted(set(override) & set(FIXED_BASELINE_GRPO_KEYS))
            if fixed:
                raise ValueError(f"pipeline.capability_grpo.{name}: {fixed} cannot differ per capability (every "
                                 "adapter's rollout budget is the grpo group's, the seed the run's); set them in the "
                                 "grpo group")

    def baseline_grpo_cfg(self, name: str, grpo: Any) -> Any:
        """The GRPO config trained baseline ``name`` trains with: ``grpo`` with ``baseline_grpo.<name>`` over it
        (built strictly and validated: an unknown or invalid key fails with its path)."""
        return _grpo_with(grpo, self.baseline_grpo.get(name), f"pipeline.baseline_grpo.{name}")

    def capability_grpo_cfg(self, capability: str, grpo: Any) -> Any:
        """The GRPO config the adapter of ``capability`` trains with: ``grpo`` with ``capability_grpo.<capability>``
        over it (built strictly and validated)."""
        return _grpo_with(grpo, self.capability_grpo.get(capability), f"pipeline.capability_grpo.{capability}")

    def grpo_overrides(self) -> list[Any]:
        """The per-capability overrides as stage hashes see them: nothing when there are none (older runs keep
        their hashes)."""
        over = {n: o for n, o in self.capability_grpo.items() if o}
        return [{"capability_grpo": over}] if over else []

    def _validate_replication(self) -> None:
        rep = self.replication
        if len(set(rep.extra_seeds)) != len(rep.extra_seeds):
            raise ValueError(f"pipeline.replication.extra_seeds: give distinct run seeds, got {rep.extra_seeds}")
        for key in ("top_k", "scale"):
            bad = [k for k in getattr(rep, key) if k < 1]
            if bad:
                raise ValueError(f"pipeline.replication.{key}: every entry must be >= 1, got {bad}")
        bad = [g for g in rep.gate_grpo if g not in GATE_GRPO_ROWS]
        if bad:
            raise ValueError(f"pipeline.replication.gate_grpo: unknown {bad}; choose from {list(GATE_GRPO_ROWS)}")


    @property
    def targets(self) -> list[str]:
        """The target env ids, in order (a single string is one target)."""
        return [self.target_env] if isinstance(self.target_env, str) else list(self.target_env)

    @property
    def multi_target(self) -> bool:
        return not isinstance(self.target_env, str)

    def kwargs_by_target(self, only_targets: bool = True) -> dict[str, dict[str, Any]]:
        """``target_env_kwargs`` as ``{id: kwargs}`` (by default only the ids in ``target_env``)."""
        rows = self.target_env_kwargs
        out: dict[str, dict[str, Any]] = {}
        if isinstance(rows, dict):
            out = {k: dict(v) for k, v in rows.items()}
        else:
            for row in rows:
                if row.id in out:
                    raise ValueError(f"pipeline.target_env_kwargs: {row.id} given twice")
                out[row.id] = dict(row.kwargs)
        return {k: v for k, v in out.items() if k in self.targets} if only_targets else out

    def env_kwargs(self, env_id: str, split: str) -> dict[str, Any]:
        """``gym.make`` kwargs of target ``env_id`` for ``split``: the configured ones, plus the τ² task split
        (``split=train|test``: τ² tasks are split, not only seeds)."""
        kw = self.kwargs_by_target().get(env_id, {})
        return {**kw, "split": split} if is_tau2(env_id) else kw


def is_tau2(env_id: str) -> bool:
    """A τ²-Bench target (``trace/tau2-<domain>[-llm]-v0``)."""
    return env_id.startswith("trace/tau2-")


def target_domain(env_id: str, default: str) -> str:
    """The synthesis domain of a target: ``tau2-airline`` / ``tau2-retail`` for τ² targets, else ``default``."""
    for domain in ("tau2-airline", "tau2-retail"):
        if env_id.startswith(f"trace/{domain}-"):
            return domain
    return default


# stages run once per adapter / baseline / replication row, as ``train/<capability>``, ``baselines/<name>`` and
# ``replication/<row>`` (another run seed appends ``@s<seed>``)
STAGE_GROUPS = ("train", "baselines", "replication")


def check_force(force: list[str]) -> None:
    """Every ``pipeline.force`` name is a stage, a group (``train``: every adapter, ``baselines``: every trained
    baseline) or one member (``train/<capability>``, ``baselines/<name>``); else ``ValueError`` listing them."""
    for name in force:
        group, _, member = name.partition("/")
        if not member and name in STAGES:
            continue
        if group == "train" and member:
            continue
        if group == "baselines" and member.partition("@")[0] in TRAINED_BASELINES:
            continue
        if group == "replication" and member:
            continue
        raise ValueError(f"pipeline.force: unknown stage {name!r}; valid: {', '.join(STAGES)}, "
                         f"train/<capability>, {', '.join('baselines/' + b for b in TRAINED_BASELINES)}, "
                         "replication/<row>")


def is_forced(stage: str, force: set[str] | list[str] | tuple[str, ...]) -> bool:
    """Whether ``stage`` (e.g. ``train/precondition_verification``) reruns under ``force``: named itself or its
    group (``train``, ``baselines``)."""
    group, _, member = stage.partition("/")
    return stage in force or (bool(member) and group in STAGE_GROUPS and group in force)


@dataclass
class PipelineConfigs:
    """Every config the pipeline composes, built strictly from one Hydra config (``conf/pipeline.yaml``)."""

    pipeline: PipelineConfig
    bootstrap: Any  # trace_train.bootstrap.config.BootstrapConfig
    analysis: Any  # trace_train.analysis.config.AnalysisConfig
    synthesis: Any  # trace_envs.synthesis.SynthesisConfig
    grpo: Any  # trace_train.grpo.GRPOConfig (validated)
    moe: MoEConfig

    @classmethod
    def from_hydra(cls, cfg: Any) -> PipelineConfigs:
        """Build and validate each group; an unknown, mistyped or invalid key raises ``ValueError`` with its path."""
        from omegaconf import OmegaConf

        from trace_envs.synthesis import SynthesisConfig
        from trace_train.analysis.config import AnalysisConfig
        from trace_train.bootstrap.config import BootstrapConfig
        from trace_train.grpo import GRPOConfig

        grpo = GRPOConfig.from_mapping(OmegaConf.to_container(cfg.grpo, resolve=True))
        grpo.validate()
        pipeline = PipelineConfig.from_dict(cfg.pipeline)
        for name in pipeline.baseline_grpo:  # a bad per-row key fails now, not when that row starts training
            pipeline.baseline_grpo_cfg(name, grpo)
        for name in pipeline.capability_grpo:
            rank = pipeline.capability_grpo_cfg(name, grpo).lora.r
            if pipeline.compose.enabled and rank != grpo.lora.r:  # the composer needs one rank (trace_moe.adapters)
                raise ValueError(f"pipeline.capability_grpo.{name}: lora.r={rank} differs from grpo.lora.r="
                                 f"{grpo.lora.r}, and the composed model needs every adapter at one rank; set it in "
                                 "the grpo group, or pipeline.compose.enabled=false")
        return cls(pipeline=pipeline, bootstrap=BootstrapConfig.from_dict(cfg.bootstrap),
                   analysis=AnalysisConfig.from_dict(cfg.analysis), synthesis=SynthesisConfig.from_dict(cfg.synthesis),
                   grpo=grpo, moe=MoEConfig.from_dict(cfg.moe))


def _grpo_with(grpo: Any, override: Mapping[str, Any] | None, path: str) -> Any:
    """``grpo`` with ``override`` over it, built strictly and validated; a nested key ({lora: {r: 8}}) overrides
    that key only."""
    if not override:
        return grpo
    base = grpo.to_dict()
    data = {k: {**base[k], **v} if isinstance(v, Mapping) and isinstance(base.get(k), dict) else v
            for k, v in override.items()}
    merged = type(grpo).from_mapping({**base, **data}, path=path)
    try:
        merged.validate()
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err
    return merged
