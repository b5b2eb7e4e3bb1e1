"""Behaviour-cloning data: episodes of the imperfect scripted expert, encoded once by the ONE renderer."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from trace_envs.records import TrajectoryRecord
from trace_envs.retail_sim import ExpertKnobs, ScriptedExpert, atomic_vocabulary, entity_id_types, split_seeds
from trace_envs.retail_sim.scenario import REASON_PHRASES
from trace_envs.retail_sim.tools import tool_vocabulary
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.decisions import DecisionPoint, decision_points
from trace_train.bootstrap.number_copy import Evidence, NumberCopies, number_copies, number_token_ids
from trace_train.bootstrap.ownership_circuit import OwnershipTargets, ownership_targets, user_id_tokens
from trace_train.model import ChatRenderer, build_tokenizer, render_chat
from trace_train.model.chat_template import chat_template
from trace_train.model.system_notes import capability_note
from trace_train.rollout.base import EpisodeRequest
from trace_train.rollout.scripted import ScriptedRolloutBackend

# Train-split seeds are partitioned: the tokenizer corpus, then the BC stream (probe uses test seeds).
TOKENIZER_SEED_OFFSET = 0
TRAIN_SEED_OFFSET = 100_000
FOCUS_SEED_OFFSET = 600_000  # the focus batches' own train seeds, past any BC stream's
FOCUS_SEED_RANGE = 100_000  # focus k draws from [offset + k * range, offset + (k + 1) * range): 12,500 steps of 8
_HINT_TAG = 7  # keeps the hint draw independent of everything else drawn from a seed
_NOTE_TAG = 11  # likewise for the system note
MAX_NOTE_ITEMS = 4


@dataclass
class Example:
    ids: list[int]
    loss_mask: list[int]
    seed: int
    copy_mask: list[int] | None = None  # 1 where the target is an entity id repeated outside an assistant turn
    decisions: list[DecisionPoint] | None = None  # act-or-refuse points (see trace_train.bootstrap.decisions)
    numbers: NumberCopies | None = None  # the numbers the episode restates (see trace_train.bootstrap.number_copy)
    ownership: OwnershipTargets | None = None  # the ownership circuit's targets (bootstrap.ownership_circuit)


def expert_backend(cfg: BootstrapConfig) -> ScriptedRolloutBackend:
    knobs = ExpertKnobs(**vars(cfg.knobs))
    return ScriptedRolloutBackend(lambda seed: ScriptedExpert(knobs, seed=seed, hint_uptake=cfg.hint_uptake))


def hinted_seed(seed: int, fraction: float) -> bool:
    """Whether the BC episode of ``seed`` shows a hint (a pure function of the seed)."""
    if fraction <= 0:
        return False
    return bool(np.random.default_rng(np.random.SeedSequence([seed, _HINT_TAG])).random() < fraction)


def system_note(seed: int, fraction: float, pool: Sequence[tuple[str, str]]) -> str:
    """The note the BC episode of ``seed`` shows after its system prompt: ``""`` for ``1 - fraction`` of the
    seeds, else 1-4 ``(name, description)`` items of ``pool`` in a random order, in the prompted baseline's
    format (a pure function of the seed)."""
    if fraction <= 0 or not pool:
        return ""
    rng = np.random.default_rng(np.random.SeedSequence([seed, _NOTE_TAG]))
    if rng.random() >= fraction:
        return ""
    k = int(rng.integers(1, min(MAX_NOTE_ITEMS, len(pool)) + 1))
    return capability_note([pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False)])


def note_pool(records: Sequence[TrajectoryRecord]) -> list[tuple[str, str]]:
    """Every capability the analysis can name on these records' domain, with its description: the space the
    prompted baseline draws its note from (the four injected ones, the others and the generic distractors)."""
    from trace_train.analysis.probes import capabilities_for, detect_domain

    return [(c.name, c.description) for c in capabilities_for(detect_domain(records))]


def with_system_note(record: TrajectoryRecord, note: str) -> TrajectoryRecord:
    """``record`` with ``note`` appended to its system message (the expert played it without the note, so
    the note changes no action: the base learns that a longer system prompt is still the same task)."""
    if not note or not record.messages or record.messages[0].get("role") != "system":
        return record
    system = {**record.messages[0], "content": (record.messages[0].get("content") or "") + note}
    return replace(record, messages=[system, *record.messages[1:]])


def expert_episodes(cfg: BootstrapConfig, seeds: Sequence[int], env_kwargs: dict | None = None,
                    hints: bool = True) -> list[TrajectoryRecord]:
    """Expert episodes on ``cfg.env`` with ``env_kwargs`` (default: the config's own); with ``hints``,
    ``cfg.hint_fraction`` of them show a hint and ``cfg.system_note_fraction`` a system note (probes pass
    ``hints=False``: they read the plain target)."""
    backend = expert_backend(cfg)
    kwargs = dict(cfg.env_kwargs if env_kwargs is None else env_kwargs)
    fraction = cfg.hint_fraction if hints else 0.0
    records = backend.rollout([EpisodeRequest(cfg.env, seed=s, sample_seed=s, env_kwargs=kwargs,
                                              hint=hinted_seed(s, fraction)) for s in seeds])
    if not hints or cfg.system_note_fraction <= 0 or not records:
        return records
    pool = note_pool(records)
    return [with_system_note(r, system_note(r.seed, cfg.system_note_fraction, pool)) for r in records]


def entity_token_ids(tokenizer) -> dict[int, str]:
    """Token id -> entity type for every pool entity id (each is one token of the domain tokenizer)."""
    types = entity_id_types()
    return dict(zip(tokenizer.convert_tokens_to_ids(list(types)), types.values()))


def copy_mask(ids: Sequence[int], loss_mask: Sequence[int], entity_ids: set[int] | dict[int, str]) -> list[int]:
    """1 at positions outside the loss mask whose token is an entity id seen earlier in ``ids``."""
    seen: set[int] = set()
    out = [0] * len(ids)
    for t, tok in enumerate(ids):
        if tok in entity_ids:
            if tok in seen and not loss_mask[t]:
                out[t] = 1
            seen.add(tok)
    return out


def copy_head_token_ids(tokenizer, cfg: BootstrapConfig) -> frozenset[int]:
    """The tokens the number-copy loss covers: the atomic numbers, plus the entity ids when
    ``number_copy_entities``."""
    numbers = number_token_ids(tokenizer, cfg.atomic_numbers)
    return numbers | frozenset(entity_token_ids(tokenizer)) if cfg.number_copy_entities else numbers


def reason_evidence(tokenizer) -> tuple[Evidence, ...]:
    """The cancel reasons as evidence: the user's phrase (e.g. "I ordered it by mistake") states the reason token."""
    phrases = {reason: tuple(tokenizer(" " + phrase, add_special_tokens=False)["input_ids"])
               for reason, phrase in REASON_PHRASES.items()}
    evidence = []
    for reason, phrase in phrases.items():
        token = tokenizer.convert_tokens_to_ids(reason)
        if token is None or token == tokenizer.unk_token_id:
            raise ValueError(f"the cancel reason {reason!r} is not one token of this tokenizer")
        others = {t for other, ids in phrases.items() if other != reason for t in ids}
        evidence.append(Evidence(int(token), phrase, frozenset(phrase) - others))
    return tuple(evidence)


def domain_vocabulary(atomic_numbers: int = 0) -> list[str]:
    """The tokenizer's atomic tokens: pool strings, tool vocabulary, then the integers below ``atomic_numbers``."""
    words = atomic_vocabulary() + tool_vocabulary() + [str(n) for n in range(atomic_numbers)]
    return list(dict.fromkeys(words))


def train_tokenizer(cfg: BootstrapConfig):
    seeds = split_seeds("train", cfg.tokenizer_episodes, offset=TOKENIZER_SEED_OFFSET)
    records = expert_episodes(cfg, seeds, env_kwargs={})  # the target's text, whatever the curriculum
    corpus = [render_chat(r.messages, r.info.get("tools") if cfg.render_tools else None,
                          add_generation_prompt=False) for r in records]
    tokenizer = build_tokenizer(corpus, domain_vocabulary(cfg.atomic_numbers), vocab_size=cfg.vocab_size, seed=cfg.seed)
    # The tool-rendering style travels with the tokenizer, so rollouts render exactly what BC saw.
    tokenizer.chat_template = chat_template("full" if cfg.render_tools else "none")
    return tokenizer


def encode(renderer: ChatRenderer, record: TrajectoryRecord, cfg: BootstrapConfig,
           entity_ids: dict[int, str] | None = None, with_decisions: bool = False,
           numbers: frozenset[int] | None = None, evidence: Sequence[Evidence] = (),
           user_tokens: frozenset[int] | None = None) -> Example:
    """One episode as ids + assistant loss mask (+ the copy mask when ``entity_ids`` is given, + its
    decision points when ``with_decisions``, + its number copies when ``numbers`` holds the number tokens, with the
    ``evidence`` the copy head also covers, + the ownership circuit's targets when ``user_tokens`` holds the user-id
    tokens; they start at the decision points, so they need ``with_decisions``)."""
    enc = renderer.encode_episode(record.messages, record.info.get("tools") if cfg.render_tools else None)
    ids, mask = enc.ids[: cfg.max_len], enc.loss_mask[: cfg.max_len]
    copies = copy_mask(ids, mask, entity_ids) if entity_ids is not None else None
    decisions = None
    if with_decisions:
        tokenizer = renderer.tokenizer
        unk = tokenizer.unk_token_id

        def token_id(entity: str) -> int | None:  # pool ids are single tokens of the domain tokenizer
            tid = tokenizer.convert_tokens_to_ids(entity)
            return None if tid is None or tid == unk else int(tid)

        points = decision_points(record.messages, enc.turns, record.info.get("task") or {}, cfg.decisions,
                                 ids, token_id)
        decisions = [p for p in points if p.position + 1 < len(ids)]
    copied_numbers = number_copies(ids, mask, numbers, evidence) if numbers is not None else None
    if user_tokens is not None and decisions is None:
        raise ValueError("the ownership circuit's targets start at the decision points: encode with_decisions=True")
    ownership = ownership_targets(ids, mask, decisions, user_tokens) if user_tokens is not None else None
    return Example(ids, mask, record.seed, copies, decisions, copied_numbers, ownership)


def batch_seeds(cfg: BootstrapConfig, step: int) -> list[int]:
    """The train seeds of BC step ``step`` (deterministic: a resumed run sees the same data)."""
    start = TRAIN_SEED_OFFSET + (cfg.data_offset_steps + step) * cfg.batch_size
    return split_seeds("train", cfg.batch_size, offset=start)


def focus_config(cfg: BootstrapConfig, index: int = 0) -> BootstrapConfig | None:
    """The config the episodes of focus ``index`` are played with: the stage's, with the focus's env kwargs and
    knobs (None without a focus)."""
    if not cfg.focuses:
        return None
    focus = cfg.focuses[index]
    return replace(cfg, env_kwargs=dict(focus.env_kwargs), knobs=replace(cfg.knobs, **focus.knobs),
                   batch_size=focus.batch_size, focus=None)


def focus_seeds(cfg: BootstrapConfig, step: int, index: int = 0) -> list[int]:
    """The train seeds of focus ``index``'s batch at BC step ``step`` (each focus has its own range, apart from the
    BC stream's and the other focuses')."""
    if not cfg.focuses:
        raise ValueError("focus_seeds needs a config with bootstrap.focus")
    size = cfg.focuses[index].batch_size
    within = (cfg.data_offset_steps + step + 1) * size
    if within > FOCUS_SEED_RANGE:
        raise ValueError(f"focus {index} has used up its {FOCUS_SEED_RANGE:,} seeds at step {step} "
                         f"(data_offset_steps={cfg.data_offset_steps}, batch_size={size})")
    return split_seeds("train", size, offset=FOCUS_SEED_OFFSET + index * FOCUS_SEED_RANGE + within - size)


def batches(cfg: BootstrapConfig, renderer: ChatRenderer,
            start_step: int) -> Iterator[tuple[int, list[Example], list[list[Example]]]]:
    """``(step, examples, focus batches)`` from ``start_step`` to the stage's last step: one batch per focus of
    ``cfg.focuses``, in order (no focus: ``[]``)."""
    entity_ids = entity_token_ids(renderer.tokenizer) if cfg.copy_loss_weight else None
    numbers = copy_head_token_ids(renderer.tokenizer, cfg) if cfg.number_copy_weight else None
    evidence = reason_evidence(renderer.tokenizer) if cfg.number_copy_reasons else ()
    users = user_id_tokens(entity_token_ids(renderer.tokenizer)) if cfg.ownership_circuit is not None else None
    focuses = [focus_config(cfg, index) for index in range(len(cfg.focuses))]

    def encoded(c: BootstrapConfig, records: list[TrajectoryRecord]) -> list[Example]:
        return [encode(renderer, r, c, entity_ids, with_decisions=c.decision_loss_weight > 0, numbers=numbers,
                       evidence=evidence, user_tokens=users) for r in records]

    for step in range(start_step, cfg.last_step):
        examples = encoded(cfg, expert_episodes(cfg, batch_seeds(cfg, step)))
        focused = [encoded(focus, expert_episodes(focus, focus_seeds(cfg, step, index)))
                   for index, focus in enumerate(focuses)]
        yield step, examples, focused


def pad_batch(examples: Sequence[Example], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded ids, attention mask, loss mask and copy mask arrays (copy mask zeros when absent)."""
    width = max(len(e.ids) for e in examples)
    ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    attn = np.zeros((len(examples), width), dtype=np.int64)
    mask = np.zeros((len(examples), width), dtype=np.int64)
    copies = np.zeros((len(examples), width), dtype=np.int64)
    for row, e in enumerate(examples):
        ids[row, : len(e.ids)] = e.ids
        attn[row, : len(e.ids)] = 1
        mask[row, : len(e.loss_mask)] = e.loss_mask
        if e.copy_mask is not None:
            copies[row, : len(e.copy_mask)] = e.copy_mask
    return ids, attn, mask, copies
