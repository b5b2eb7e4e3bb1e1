"""Typed bootstrap config; mirrors ``conf/bootstrap/default.yaml`` one to one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trace_envs.config_builder import build


def env_data_version(env_id: str) -> int:
    """The ``data_version`` class attribute of a registered env (1 when it declares none)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import trace_envs  # noqa: F401  (registers the ids)

    entry_point = gym.spec(env_id).entry_point
    env_class = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    return int(getattr(env_class, "data_version", 1))


BOOTSTRAP_PACKING = ("none", "packed")  # a bootstrap batch is its seeds' episodes: no bucketing across batches


NUMBER_COPY_WIDENINGS = ("number_copy_entities", "number_copy_reasons")  # flags that widen the number-copy loss

# What every stage of a chain shares with its init_from stage (a stage trains on the first stage's tokenizer and loads
# its parent's weights), and what each one is part of: a stage that sets another value is refused, not ignored.
_CHAIN_KEPT = {"atomic_numbers": "tokenizer", "vocab_size": "tokenizer", "tokenizer_episodes": "tokenizer",
               "preset": "model shape"}


@dataclass
class KnobsConfig:
    precondition: float = 0.5
    structured: float = 0.5
    multi_step: float = 0.5
    precision: float = 0.5


@dataclass
class FocusConfig:
    """A second batch at every step, of episodes the stage's mix rarely shows: ``env_kwargs`` pin them (e.g. single
    returns, most asking for a gift-card refund) and ``knobs`` override the stage's expert knobs for them. Its loss
    (the stage's own: LM, copy, number copy, decisions) is added at ``weight``. Seeds come from their own range."""

    env_kwargs: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, float] = field(default_factory=dict)
    batch_size: int = 8
    weight: float = 1.0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.knobs) - set(KnobsConfig.__dataclass_fields__))
        if unknown:
            raise ValueError(f"bootstrap.focus.knobs: unknown knob(s) {unknown}; "
                             f"known: {sorted(KnobsConfig.__dataclass_fields__)}")
        if self.batch_size < 1 or self.weight <= 0:
            raise ValueError(f"bootstrap.focus needs batch_size >= 1 and weight > 0, got {self.batch_size}, "
                             f"{self.weight}")


MAX_FOCUSES = 4  # each focus draws its seeds from its own 100,000 train seeds (trace_train.bootstrap.data)


@dataclass
class OwnershipCircuitConfig:
    """The ownership circuit's losses (trace_train.bootstrap.ownership_circuit): pointer terms for a layer-0 head
    that matches each user id with its earlier copies and a layer-1 head that looks up the order's owner from the
    precondition decision point, plus two "seen before" readouts. Pick the two heads in different key/value groups
    from the number-copy head of the last layer (on the tiny preset head 0 shares its group with head 1)."""

    match_head: int = 1
    lookup_head: int = 2
    pointer_weight: float = 1.0
    seen_weight: float = 5.0
    ownership_weight: float = 1.0

    def __post_init__(self) -> None:
        for key in ("match_head", "lookup_head"):
            if getattr(self, key) < 0:
                raise ValueError(f"bootstrap.ownership_circuit.{key} must be >= 0, got {getattr(self, key)}")
        for key in ("pointer_weight", "seen_weight", "ownership_weight"):
            if not getattr(self, key) >= 0:  # NaN fails too
                raise ValueError(f"bootstrap.ownership_circuit.{key} must be >= 0, got {getattr(self, key)}")


@dataclass
class BootstrapConfig:
    env: str = "trace/retail-sim-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. {n_intents: 1} for a curriculum stage
    preset: str = "tiny"
    vocab_size: int = 1024
    tokenizer_episodes: int = 1500
    render_tools: bool = False  # tiny models learn the tools from data; schemas would triple the context
    # The integers 0 .. atomic_numbers - 1 as single tokens (0: digits stay one token each, as the shipped base).
    # A tiny model copies a value from its context only when the value is one token (reference/
    # tiny-model-atomic-ids.md); prices, price bounds and totals are values the agent copies. Read when the
    # tokenizer is trained (the first stage); an ``init_from`` stage that does not set it inherits it.
    atomic_numbers: int = 0
    knobs: KnobsConfig = field(default_factory=KnobsConfig)
    steps: int = 2000
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    # Auxiliary copy loss: next-token loss, at this weight, on entity ids outside assistant turns that
    # already occurred earlier in the episode (tool results echo the ids they were called with). These
    # targets are pure copies, so they train the copy circuit densely without teaching tool output.
    copy_loss_weight: float = 0.0
    # Number copying (trace_train.bootstrap.number_copy): at this weight, one head of the last layer learns to
    # point at the earlier occurrence of each number the assistant restates (a price, a bound, a total) and to
    # write the number it points at. Needs ``atomic_numbers`` (a number must be one token to be pointed at).
    number_copy_weight: float = 0.0
    # The number-copy loss also covers the pool entity ids the assistant restates (an order, an item, a payment
    # method: single tokens of the domain tokenizer), so the same head learns to point at the id the user named.
    number_copy_entities: bool = False
    # ... and the cancel reasons, which the user states in other words ("I ordered it by mistake"): the head points
    # at that phrase and writes the reason from it (trace_train.bootstrap.number_copy.Evidence).
    number_copy_reasons: bool = False
    # Auxiliary decision probe: a linear head on the final hidden state at each act-or-refuse point is
    # trained, at this weight, to predict the oracle's decision (trace_train.bootstrap.decisions). It
    # shapes what the base represents (whose order, which status) while the LM head still clones the
    # imperfect expert; the head is not saved with the policy.
    decision_loss_weight: float = 0.0
    # The decisions the head reads, one column each (trace_train.bootstrap.decisions.DECISIONS).
    decisions: tuple[str, ...] = ("precondition",)
    # Hints (paper §3.5): this share of BC episodes shows the hint of one capability the task requires
    # (trace_envs.hints), and the expert follows it with probability ``hint_uptake`` (its knob for that
    # capability x (1 - uptake)), so the base learns to use guidance some of the time.
    hint_fraction: float = 0.0
    hint_uptake: float = 0.0
    # This share of BC episodes carries a note after the system prompt: 1-4 capability descriptions in the
    # prompted baseline's format (trace_train.model.system_notes), which the expert ignores. Without it the
    # base has only ever seen one system prompt and the prompted baseline's longer one derails it.
    system_note_fraction: float = 0.0
    max_len: int = 2048
    # How a batch reaches the model: "none" pads it to its longest episode (2-D padding mask); "packed" runs it
    # as one row with attention kept inside each episode (trace_train.grpo.packing). Same episodes, same loss,
    # mathematically equal gradients (floats differ in rounding), ~2x faster on CPU: no padded tokens, and causal
    # attention skips the blocks above the diagonal that the padding mask makes SDPA compute. An ``init_from``
    # stage that does not set it inherits it.
    packing: str = "none"
    seed: int = 0
    threads: int = 1  # torch threads; the ``init_from`` stages a run trains use the last stage's (see ``parent``)
    checkpoint_every: int = 100
    # Pause (checkpoint and stop, with a message) once a run has trained this long; the same command continues.
    # A pause never finishes a stage early: a finished stage is always the configured one, so its hash is true.
    # One budget covers the whole invocation: the ``init_from`` stages it trains first spend from it too.
    time_budget_min: float | None = None
    probe_episodes: int = 100
    # Stop after this step although the LR schedule spans ``steps`` (records where a budgeted run stopped).
    stop_step: int | None = None
    # Continue from the model of another bootstrap config (staged training); it runs first if not cached.
    init_from: dict[str, Any] | None = None
    data_offset_steps: int = 0  # skip this many steps' worth of BC seeds (a continuation sees fresh episodes)
    # A focused second batch per step (FocusConfig), e.g. the gift-card refunds the target's mix rarely shows; a
    # list gives one more batch per focus, each with its own seeds and weight (read through ``focuses``).
    focus: FocusConfig | list[FocusConfig] | None = None
    # The ownership circuit's auxiliary losses (OwnershipCircuitConfig); needs the precondition decision.
    ownership_circuit: OwnershipCircuitConfig | None = None

    def __post_init__(self) -> None:
        for key in ("steps", "batch_size", "checkpoint_every", "max_len"):
            if getattr(self, key) < 1:
                raise ValueError(f"bootstrap.{key} must be >= 1, got {getattr(self, key)}")
        if self.warmup_steps < 0:
            raise ValueError(f"bootstrap.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.stop_step is not None and self.stop_step < 1:
            raise ValueError(f"bootstrap.stop_step must be >= 1 or null (train all of bootstrap.steps), got "
                             f"{self.stop_step}")
        if not self.lr > 0:  # NaN fails too
            raise ValueError(f"bootstrap.lr must be > 0, got {self.lr}")
        for key in ("hint_fraction", "hint_uptake", "system_note_fraction"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"bootstrap.{key} must be in [0, 1], got {getattr(self, key)}")
        from trace_train.bootstrap.decisions import DECISIONS

        unknown = [d for d in self.decisions if d not in DECISIONS]
        if unknown or not self.decisions or len(set(self.decisions)) != len(self.decisions):
            raise ValueError(f"bootstrap.decisions must be distinct names from {list(DECISIONS)}, got "
                             f"{list(self.decisions)}")
        if self.packing not in BOOTSTRAP_PACKING:
            raise ValueError(f"bootstrap.packing must be one of {BOOTSTRAP_PACKING}, got {self.packing!r}")
        if self.atomic_numbers < 0:
            raise ValueError(f"bootstrap.atomic_numbers must be >= 0, got {self.atomic_numbers}")
        if self.number_copy_weight < 0:
            raise ValueError(f"bootstrap.number_copy_weight must be >= 0, got {self.number_copy_weight}")
        if self.number_copy_weight and not self.atomic_numbers:
            raise ValueError("bootstrap.number_copy_weight needs bootstrap.atomic_numbers > 0: a number is pointed "
                             "at as one token")
        for key in NUMBER_COPY_WIDENINGS:
            if getattr(self, key) and not self.number_copy_weight:
                raise ValueError(f"bootstrap.{key} needs bootstrap.number_copy_weight > 0: it widens that loss")
        if isinstance(self.focus, list) and not 1 <= len(self.focus) <= MAX_FOCUSES:
            raise ValueError(f"bootstrap.focus lists {len(self.focus)} focuses; give 1 to {MAX_FOCUSES} (or null)")
        if self.ownership_circuit is not None and not (self.decision_loss_weight > 0
                                                       and "precondition" in self.decisions):
            raise ValueError("bootstrap.ownership_circuit needs bootstrap.decision_loss_weight > 0 with the "
                             "precondition decision: its lookup starts at the precondition decision points")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, path: str = "bootstrap") -> BootstrapConfig:
        """Build from the ``bootstrap`` group (a mapping or DictConfig); unknown or mistyped keys fail with a path."""
        return build(cls, data, path)

    @property
    def parent(self) -> "BootstrapConfig | None":
        if not self.init_from:
            return None
        # a stage that does not set its own packing (or atomic_numbers) inherits its child's:
        # `bootstrap.packing=packed` packs the chain
        inherited = {"packing": self.packing, "atomic_numbers": self.atomic_numbers}
        # how this invocation runs, not what it makes (neither is in the hash): the whole chain takes the last stage's
        # threads and time budget, whatever its stages say, so `bootstrap.threads=1 bootstrap.time_budget_min=30`
        # reaches every stage the run trains
        invocation = {"threads": self.threads, "time_budget_min": self.time_budget_min}
        parent = BootstrapConfig.from_dict({**inherited, **self.init_from, **invocation}, "bootstrap.init_from")
        for key in _CHAIN_KEPT:  # a stage trains on its first stage's tokenizer and continues its model
            if getattr(parent, key) != getattr(self, key):
                raise ValueError(f"bootstrap.{key}={getattr(self, key)} differs from its init_from stage's "
                                 f"{getattr(parent, key)}: every stage of a chain keeps the first stage's "
                                 f"{_CHAIN_KEPT[key]}")
        return parent

    @property
    def focuses(self) -> tuple[FocusConfig, ...]:
        """Every focus of the stage, in order (none, one, or the listed ones)."""
        if self.focus is None:
            return ()
        return tuple(self.focus) if isinstance(self.focus, list) else (self.focus,)

    @property
    def last_step(self) -> int:
        return min(self.steps, self.stop_step) if self.stop_step is not None else self.steps

    def content_hash(self) -> str:
        """Hash of everything that determines the trained model (threads and budget excluded)."""
        relevant = asdict(self)
        for key in ("threads", "checkpoint_every", "probe_episodes", "time_budget_min"):
            relevant.pop(key)
        if self.packing == "none":  # configs that pad keep the hashes they had before packing existed
            relevant.pop("packing")
        if not self.atomic_numbers:  # nor configs whose digits stay single tokens
            relevant.pop("atomic_numbers")
        if not self.number_copy_weight:  # nor configs without number copying
            relevant.pop("number_copy_weight")
        for key in NUMBER_COPY_WIDENINGS:
            if not getattr(self, key):
                relevant.pop(key)
        if not self.decision_loss_weight:  # configs without the head keep the hashes they had before it
            relevant.pop("decision_loss_weight")
        for key in ("hint_fraction", "hint_uptake", "system_note_fraction"):  # nor configs without hints / notes
            if not getattr(self, key):
                relevant.pop(key)
        if not self.decision_loss_weight or self.decisions == ("precondition",):  # nor the precondition-only head
            relevant.pop("decisions")
        else:
            relevant["decisions"] = list(self.decisions)
        if self.focus is None:  # configs without a focus keep the hashes they had before it
            relevant.pop("focus")
        if self.ownership_circuit is None:  # nor configs without the ownership circuit
            relevant.pop("ownership_circuit")
        if self.init_from:
            relevant["init_from"] = self.parent.content_hash()
        version = env_data_version(self.env)
        if version != 1:  # version-1 envs keep the hashes they had before versions existed
            relevant["env_data_version"] = version
        return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]
