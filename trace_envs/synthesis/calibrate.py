"""Calibration (paper §3.4): G rollouts x S seeds of a policy on an env, group statistics, the gate,
and a bounded, logged search over a family's difficulty knobs until the gate passes.

A *collector* plays the rollouts: ``(env id, env kwargs, seeds, group size) -> (rewards, successes)``,
each a seeds x group-size matrix. ``scripted_collector`` plays a *policy factory* (group member index
-> a fresh policy with ``reset(obs, info, seed)`` and ``act(obs) -> str``: the scripted experts);
the paper calibrates against the base model, whose collector (``trace_train.calibration``) plays the
same requests through a batched rollout backend. Every member of a group plays the same env seed,
so a group's spread comes only from the members' own randomness: members are seeded differently.

Hints (paper §3.5): with ``hint_fraction`` > 0 the first ``round(fraction × G)`` members of every group
play with the env's hint (``reset(options={"hint": True})``); a collector then receives their indices
as ``hinted=``. The gate judges all members together, as GRPO trains on them, and the statistics of
the hinted and the unhinted members are reported beside it, so a family that is too hard unhinted
but passes with hints (the paper's remedy) says so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from trace_envs.domains import get_domain
from trace_envs.episode import ScriptedPolicy, play_scripted
from trace_envs.families import FAMILIES, FamilyExpert
from trace_envs.hints import hinted_count
from trace_envs.synthesis.config import CalibrationGate, SynthesisConfig

logger = logging.getLogger(__name__)


PolicyFactory = Callable[[int], ScriptedPolicy]
# (env id, env kwargs, seeds, group size[, hinted=member indices]) -> (rewards, successes), each S x G.
# ``hinted`` is passed only when some members play with the hint.
Collector = Callable[..., tuple[np.ndarray, np.ndarray]]


def scripted_policy_factory(knobs: dict[str, float], seed: int = 0, hint_uptake: float = 0.0) -> PolicyFactory:
    """Member ``m`` gets ``FamilyExpert(knobs, seed=seed * 100_003 + m, hint_uptake=hint_uptake)``."""
    return lambda member: FamilyExpert(dict(knobs), seed=seed * 100_003 + member, hint_uptake=hint_uptake)


def hinted_member_indices(hint_fraction: float, group_size: int) -> tuple[int, ...]:
    """The calibration members that play with the hint: the first ``fraction × G`` (a whole number)."""
    return tuple(range(hinted_count(hint_fraction, group_size, "synthesis.hint_fraction")))


@dataclass
class CalibrationStats:
    n_seeds: int
    group_size: int
    mean_reward: float
    success_rate: float
    reward_std: float
    frac_all_success: float
    frac_all_zero: float
    frac_constant: float
    frac_informative: float
    pass_at_k: dict[str, float] = field(default_factory=dict)
    # With hints: the same statistics over the hinted / the unhinted members alone (None without hints).
    hinted: "CalibrationStats | None" = None
    unhinted: "CalibrationStats | None" = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def group_statistics(rewards: np.ndarray, successes: np.ndarray, pass_k: tuple[int, ...] = (1, 4, 8, 16)
                     ) -> CalibrationStats:
    """Statistics of an (S seeds x G members) reward matrix and its success matrix."""
    rewards = np.asarray(rewards, dtype=float)
    successes = np.asarray(successes, dtype=bool)
    n_seeds, group = rewards.shape
    constant = np.ptp(rewards, axis=1) == 0
    counts = successes.sum(axis=1)
    return CalibrationStats(
        n_seeds=n_seeds, group_size=group,
        mean_reward=float(rewards.mean()), success_rate=float(successes.mean()), reward_std=float(rewards.std()),
        frac_all_success=float(successes.all(axis=1).mean()), frac_all_zero=float((rewards == 0).all(axis=1).mean()),
        frac_constant=float(constant.mean()), frac_informative=float(1.0 - constant.mean()),
        pass_at_k={str(k): float(np.mean([pass_at_k(group, int(c), k) for c in counts])) for k in pass_k if k <= group},
    )


GATE_EPSILON = 1e-9  # the gate's bounds are inclusive: a mean of 3/5 that reads 0.6000000000000001 is at 0.6


def gate_failures(stats: CalibrationStats, gate: CalibrationGate, groups: bool = True) -> list[str]:
    """Human-readable reasons the gate rejects ``stats`` (empty = passes); bounds are inclusive, up to float
    rounding (``GATE_EPSILON``). ``groups=False`` judges the per-episode bounds only (rates and reward std),
    not the shares of all-success / all-zero / constant groups."""
    out = []
    eps = GATE_EPSILON
    if not gate.reward_min - eps <= stats.mean_reward <= gate.reward_max + eps:
        out.append(f"mean reward {stats.mean_reward:.3f} outside [{gate.reward_min}, {gate.reward_max}]")
    if not gate.success_min - eps <= stats.success_rate <= gate.success_max + eps:
        out.append(f"success rate {stats.success_rate:.3f} outside [{gate.success_min}, {gate.success_max}]")
    if stats.reward_std < gate.min_std - eps:
        out.append(f"reward std {stats.reward_std:.3f} < {gate.min_std}")
    if not groups:
        return out
    if stats.frac_all_success > gate.max_all_success + eps:
        out.append(f"all-success groups {stats.frac_all_success:.2f} > {gate.max_all_success}")
    if stats.frac_all_zero > gate.max_all_zero + eps:
        out.append(f"all-zero groups {stats.frac_all_zero:.2f} > {gate.max_all_zero}")
    if stats.frac_constant > gate.max_constant + eps:
        out.append(f"constant groups {stats.frac_constant:.2f} > {gate.max_constant}")
    return out


def gate_distance(stats: CalibrationStats, gate: CalibrationGate) -> float:
    """Total violation of the gate (0 = passes); ranks the closest failing trial."""
    def outside(x: float, lo: float, hi: float) -> float:
        return max(0.0, lo - x, x - hi)
    return (outside(stats.mean_reward, gate.reward_min, gate.reward_max)
            + outside(stats.success_rate, gate.success_min, gate.success_max)
            + max(0.0, gate.min_std - stats.reward_std)
            + max(0.0, stats.frac_all_success - gate.max_all_success)
            + max(0.0, stats.frac_all_zero - gate.max_all_zero)
            + max(0.0, stats.frac_constant - gate.max_constant))


def with_hint_split(stats: CalibrationStats, rewards: np.ndarray, successes: np.ndarray,
                    hinted: tuple[int, ...], pass_k: tuple[int, ...]) -> CalibrationStats:
    """``stats`` with the statistics of the hinted and of the unhinted members (columns) attached."""
    if not hinted:
        return stats
    cols = np.zeros(rewards.shape[1], dtype=bool)
    cols[list(hinted)] = True
    stats.hinted = group_statistics(rewards[:, cols], successes[:, cols], pass_k)
    if not cols.all():
        stats.unhinted = group_statistics(rewards[:, ~cols], successes[:, ~cols], pass_k)
    return stats


def collect(env: gym.Env, policy_factory: PolicyFactory, seeds: list[int], group_size: int,
            hinted: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Play ``group_size`` members on every seed (members in ``hinted`` with the env's hint); returns
    (rewards, successes), each S x G."""
    rewards = np.zeros((len(seeds), group_size))
    successes = np.zeros((len(seeds), group_size), dtype=bool)
    for i, seed in enumerate(seeds):
        for member in range(group_size):
            result = play_scripted(env, policy_factory(member), int(seed),
                                   options={"hint": True} if member in hinted else None)
            rewards[i, member] = result.reward
            successes[i, member] = result.success
    return rewards, successes


def scripted_collector(policy_factory: PolicyFactory) -> Collector:
    """A collector that plays ``policy_factory``'s policies one episode at a time."""
    def run(env_id: str, env_kwargs: dict[str, Any], seeds: list[int], group_size: int,
            hinted: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
        env = gym.make(env_id, **env_kwargs)
        try:
            return collect(env, policy_factory, seeds, group_size, hinted)
        finally:
            env.close()
    return run


def expert_collector(cfg: SynthesisConfig) -> Collector:
    """The default collector: the scripted family expert with ``cfg.policy``'s knobs, seed and hint uptake."""
    return scripted_collector(scripted_policy_factory(cfg.policy.knobs, cfg.policy.seed, cfg.policy.hint_uptake))


def calibrate_env(env_id: str, env_kwargs: dict[str, Any], collector: Collector, cfg: SynthesisConfig
                  ) -> CalibrationStats:
    """Group statistics of ``cfg.n_seeds`` x ``cfg.group_size`` collected rollouts on one env (with the
    hinted / unhinted split when ``cfg.hint_fraction`` > 0)."""
    seeds = list(range(cfg.seed_offset, cfg.seed_offset + cfg.n_seeds))
    hinted = hinted_member_indices(cfg.hint_fraction, cfg.group_size)
    if hinted:
        rewards, successes = collector(env_id, dict(env_kwargs), seeds, cfg.group_size, hinted=hinted)
    else:
        rewards, successes = collector(env_id, dict(env_kwargs), seeds, cfg.group_size)
    if np.shape(rewards) != (len(seeds), cfg.group_size) or np.shape(successes) != np.shape(rewards):
        raise ValueError(f"collector returned shapes {np.shape(rewards)} / {np.shape(successes)}, "
                         f"expected {(len(seeds), cfg.group_size)}")
    rewards, successes = np.asarray(rewards, dtype=float), np.asarray(successes, dtype=bool)
    if not np.isfinite(rewards).all():  # NaN passes every gate bound it is compared with
        raise ValueError(f"{env_id} {env_kwargs}: the policy's episodes earned non-finite rewards "
                         f"({int((~np.isfinite(rewards)).sum())} of {rewards.size}); the env's reward is broken")
    return with_hint_split(group_statistics(rewards, successes, cfg.pass_k), rewards, successes, hinted, cfg.pass_k)


@dataclass
class Trial:
    knobs: dict[str, Any]
    stats: CalibrationStats
    failures: list[str]
    unhinted_failures: list[str] | None = None  # the gate on the unhinted members alone (None: no hints)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def needs_hints(self) -> bool:
        """Passes the gate with its hinted members, not on the unhinted ones alone."""
        return self.passed and bool(self.unhinted_failures)

    def to_dict(self) -> dict[str, Any]:
        return {"knobs": self.knobs, "stats": self.stats.to_dict(), "failures": self.failures, "passed": self.passed,
                "unhinted_failures": self.unhinted_failures, "needs_hints": self.needs_hints}


def make_trial(knobs: dict[str, Any], stats: CalibrationStats, gate: CalibrationGate) -> Trial:
    """Judge ``stats`` (all members) against the gate, and its unhinted members alone when hinted.

    The unhinted members are judged on the per-episode bounds only: their groups are smaller than G, and a
    group of G/2 is all-zero or constant far more often than a group of G, so an env whose hint changes
    nothing would read as passing "only with hints"."""
    unhinted = None
    if stats.hinted is not None:
        unhinted = (gate_failures(stats.unhinted, gate, groups=False) if stats.unhinted is not None
                    else ["every member is hinted"])
    return Trial(dict(knobs), stats, gate_failures(stats, gate), unhinted)


@dataclass
class SearchResult:
    capability: str
    domain: str
    trials: list[Trial]
    chosen: Trial | None  # the first passing trial; None when no candidate passes

    @property
    def passed(self) -> bool:
        return self.chosen is not None

    def closest(self, gate: CalibrationGate) -> Trial:
        return min(self.trials, key=lambda t: gate_distance(t.stats, gate))

    def to_dict(self) -> dict[str, Any]:
        return {"capability": self.capability, "domain": self.domain, "passed": self.passed,
                "chosen": self.chosen.to_dict() if self.chosen else None,
                "trials": [t.to_dict() for t in self.trials]}


def family_env_id(capability: str) -> str:
    if capability not in FAMILIES:
        raise KeyError(f"no env family for capability {capability!r}; families: {sorted(FAMILIES)}")
    return f"trace/{capability}-v0"


def domain_ladder(capability: str, domain: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``candidates`` as ``domain`` honours them (``Domain.fixed_settings`` / ``setting_ranges``): a setting the
    domain does not vary is left out of every candidate, a candidate with a value outside the domain's range is
    skipped, and a candidate equal to an earlier one is tried once. Each change is logged; ``ValueError`` when
    no candidate is left."""
    honoured = get_domain(domain)
    ladder: list[dict[str, Any]] = []
    for knobs in candidates:
        kept = {k: v for k, v in knobs.items() if k not in honoured.fixed_settings}
        if kept != knobs:
            logger.info("calibrate %s on %s: %s left out of %s (the domain does not vary them)", capability, domain,
                        sorted(set(knobs) - set(kept)), knobs)
        problems = [p for k, v in kept.items() if (p := honoured.setting_problem(k, v)) is not None]
        if problems:
            logger.info("calibrate %s on %s: candidate %s skipped: %s", capability, domain, knobs, "; ".join(problems))
        elif kept in ladder:
            logger.info("calibrate %s on %s: candidate %s is %s again there; tried once", capability, domain, knobs,
                        kept)
        else:
            ladder.append(kept)
    if not ladder:
        raise ValueError(f"no calibration candidate for {capability} is honoured by domain {domain!r}: {candidates}")
    return ladder


def check_search_kwargs(capability: str, cfg: SynthesisConfig, env_kwargs: Mapping[str, Any] | None
                        ) -> dict[str, Any]:
    """``env_kwargs`` for every candidate of :func:`search_knobs` (a copy); ``ValueError`` when one names the domain
    (``synthesis.domain`` sets it) or a knob the candidates set (the search would replace it)."""
    env_kwargs = dict(env_kwargs or {})
    searched = sorted({k for knobs in cfg.search.ladder(capability, cfg.domain) for k in knobs} | {"domain"})
    clash = sorted(set(env_kwargs) & set(searched))
    if clash:
        raise ValueError(f"env_kwargs {clash}: the search sets {', '.join(searched)} itself (the domain from "
                         "synthesis.domain); drop them from env_kwargs, or calibrate one setting with search=false")
    return env_kwargs


def search_knobs(capability: str, cfg: SynthesisConfig, policy_factory: PolicyFactory | None = None,
                 on_trial: Callable[[Trial], None] | None = None, collector: Collector | None = None,
                 env_kwargs: Mapping[str, Any] | None = None) -> SearchResult:
    """Try the configured difficulty candidates in order (at most ``max_trials``); stop at the first pass.

    Rollouts come from ``collector`` when given, else from ``policy_factory``'s policies, else from the
    scripted expert of ``cfg.policy``. ``env_kwargs`` (gym.make keyword arguments) go to every candidate beside its
    knobs; ``ValueError`` when one names the domain (``synthesis.domain`` sets it) or a knob the candidates set."""
    env_kwargs = check_search_kwargs(capability, cfg, env_kwargs)
    if collector is None:
        collector = scripted_collector(policy_factory) if policy_factory else expert_collector(cfg)
    env_id = family_env_id(capability)
    candidates = domain_ladder(capability, cfg.domain, cfg.search.ladder(capability, cfg.domain))
    trials: list[Trial] = []
    for knobs in candidates[: cfg.search.max_trials]:
        stats = calibrate_env(env_id, {"domain": cfg.domain, **env_kwargs, **knobs}, collector, cfg)
        trial = make_trial(knobs, stats, cfg.gate)
        logger.info("calibrate %s %s: reward %.3f success %.3f std %.3f -> %s%s", capability, knobs,
                    stats.mean_reward, stats.success_rate, stats.reward_std, "PASS" if trial.passed else trial.failures,
                    _hint_note(stats, trial))
        trials.append(trial)
        if on_trial:
            on_trial(trial)
        if trial.passed:
            return SearchResult(capability, cfg.domain, trials, trial)
        if cfg.search.stop_when_too_hard and too_hard(stats, cfg.gate):
            logger.info("calibrate %s: %s is already too hard; harder candidates skipped", capability, knobs)
            break
    return SearchResult(capability, cfg.domain, trials, None)


def _hint_note(stats: CalibrationStats, trial: Trial) -> str:
    """The hinted/unhinted split of a trial's log line; when it passes only with hints, the per-episode bounds
    the unhinted members miss on their own."""
    if stats.hinted is None:
        return ""
    unhinted = "–" if stats.unhinted is None else f"{stats.unhinted.success_rate:.3f}"
    only_hinted = ""
    if trial.needs_hints:
        only_hinted = f"; passes only with hints: unhinted alone, {'; '.join(trial.unhinted_failures)}"
    return f" (success hinted {stats.hinted.success_rate:.3f}, unhinted {unhinted}{only_hinted})"


def too_hard(stats: CalibrationStats, gate: CalibrationGate) -> bool:
    return stats.success_rate < gate.success_min and stats.mean_reward < gate.reward_min
