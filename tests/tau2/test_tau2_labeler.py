"""The τ² programmatic labeler recovers exactly the deficits injected into the τ² scripted expert."""

from __future__ import annotations

import gymnasium as gym
import pytest
from omegaconf import OmegaConf

import trace_envs  # noqa: F401
from trace_envs.families import FAMILIES, FamilyExpert, play
from trace_envs.retail_sim.experts import KNOB_TO_CAPABILITY
from trace_envs.tau2.runtime import tau2_available
from trace_train.analysis.aggregate import aggregate
from trace_train.analysis.labels import Label
from trace_train.analysis.probes import ProgrammaticLabeler, capabilities_for
from trace_train.analysis.run import auto_domain, success_map
from trace_train.trajectory import TrajectoryRecord

pytestmark = [pytest.mark.tau2, pytest.mark.skipif(not tau2_available(), reason="the real tau2 package is missing")]
REAL = sorted(KNOB_TO_CAPABILITY.values())
_ENVS: dict = {}


def records(domain: str, knobs: dict, seeds: range, expert_seed: int = 0) -> list[TrajectoryRecord]:
    out = []
    for cap in sorted(FAMILIES):
        env = _ENVS.setdefault((cap, domain), gym.make(f"trace/{cap}-v0", domain=domain))
        for seed in seeds:
            reward, info = play(env, FamilyExpert(knobs, seed=expert_seed), seed)
            out.append(TrajectoryRecord(
                episode_id=f"{cap}|{domain}|{seed}", env_id=f"trace/{cap}-v0", seed=seed,
                messages=env.unwrapped.transcript, reward=reward, success=bool(info["success"]),
                termination=info["termination"], policy="expert", info={"task": info["task"]}))
    return out


def clean(recs):
    caps = capabilities_for("tau2", include_generic=False)
    run = ProgrammaticLabeler(caps, noise_rate=0.0).clean_labels(recs)
    assert not run.missing, sorted(run.missing)[:3]  # no probe raised
    return run


@pytest.mark.parametrize("domain", ["tau2-airline", "tau2-retail"])
def test_each_knob_explains_exactly_the_failures(domain):
    oracle = records(domain, {}, range(6))
    assert auto_domain(oracle) == "tau2" and all(r.success for r in oracle)
    assert all(label is not Label.LACKING for label in clean(oracle).labels.values())
    for knob, cap in sorted(KNOB_TO_CAPABILITY.items()):
        recs = records(domain, {knob: 1.0}, range(6))
        labels = clean(recs)
        failed = {r.episode_id for r in recs if not r.success}
        lacking = {r.episode_id for r in recs if labels[(r.episode_id, cap)] is Label.LACKING}
        assert failed and lacking == failed, (knob, failed ^ lacking)
        for r in recs:
            for other in REAL:
                if other != cap:
                    assert labels[(r.episode_id, other)] is not Label.LACKING, (knob, other, r.episode_id)


@pytest.mark.parametrize("knobs", [("precondition", "multi_step"), ("structured", "precision")])
def test_analysis_selects_exactly_the_injected_deficits(knobs):
    recs = records("tau2-retail", {k: 0.6 for k in knobs}, range(12), expert_seed=3)
    recs += records("tau2-airline", {k: 0.6 for k in knobs}, range(12), expert_seed=3)
    caps = capabilities_for("tau2")
    runs = ProgrammaticLabeler(caps, noise_rate=0.05, seed=0).label(recs, 10)
    result = aggregate(runs, caps, success_map(recs))
    assert {c.name for c in result.selected} == {KNOB_TO_CAPABILITY[k] for k in knobs}


def test_analyze_picks_the_tau2_labeler(tmp_path):
    from trace_train.analysis.run import run_analysis

    recs = records("tau2-retail", {"precondition": 0.7, "multi_step": 0.7}, range(10), expert_seed=5)
    cfg = OmegaConf.load("conf/analysis/default.yaml")
    out = run_analysis(recs, cfg, "programmatic", tmp_path)
    assert {c.name for c in out.capabilities} >= set(REAL)
    assert {c.name for c in out.result.selected} == {"precondition_verification", "multi_step_task_completion"}


# -- target records: trace/tau2-<domain>-v0 episodes, gold actions from the task file ---------------------------
TARGET_DEFICITS = {"stop": "multi_step_task_completion", "wrong_arg": "tool_calling_precision",
                   "foreign_write": "precondition_verification"}
TARGETS_PER_DOMAIN = 3


def _gold_writes(task, write_tools) -> list[int]:
    return [i for i, a in enumerate(task.evaluation_criteria.actions or []) if a.name in write_tools]


def _perturbable(action) -> str | None:
    """The first argument of a write that is neither the record id nor a record choice (str-valued)."""
    from trace_train.analysis.tau2_labeler import CHOICE_KEYS, ENTITY_KEYS

    return next((k for k, v in action.arguments.items()
                 if isinstance(v, str) and k not in ENTITY_KEYS and k not in CHOICE_KEYS), None)


def _foreign_write(domain: str, task) -> tuple[str, dict]:
    """A cancellation of a record that no gold action of ``task`` names (another customer's, in general)."""
    from trace_envs.tau2.runtime import pristine_db

    named = {str(v) for a in task.evaluation_criteria.actions or [] for v in a.arguments.values()}
    db = pristine_db(domain)
    if domain == "airline":
        rid = next(r for r, res in sorted(db.reservations.items()) if res.status is None and r not in named)
        return "cancel_reservation", {"reservation_id": rid}
    oid = next(o for o, order in sorted(db.orders.items()) if order.status == "pending" and o not in named)
    return "cancel_pending_order", {"order_id": oid, "reason": "no longer needed"}


class GoldWithDeficit:
    """tau2 gold replay (``trace_envs.tau2.policies.gold_turns``, what ``policy=gold`` plays) with one injected
    deficit: ``stop`` after the first gold write, a ``wrong_arg`` in the first gold write, or a ``foreign_write``
    on a record the task never names; ``None`` is plain gold replay."""

    def __init__(self, deficit: str | None, write_tools: frozenset[str]):
        self.deficit, self.write_tools, self.name = deficit, write_tools, deficit or "gold"
        self._turns: list[str] = []

    def reset(self, observation, info, seed=None):
        from trace_envs.tau2.policies import gold_turns
        from trace_envs.tau2.tasks import load_task_set

        meta = info["task"]
        task = load_task_set(meta["domain"], meta["task_source"]).tasks[str(meta["task_id"])].model_copy(deep=True)
        actions = task.evaluation_criteria.actions
        writes = _gold_writes(task, self.write_tools)
        if self.deficit == "stop":
            del actions[writes[0] + 1:]
        elif self.deficit == "wrong_arg":
            action = actions[writes[0]]
            key = _perturbable(action)
            action.arguments = {**action.arguments, key: f"{action.arguments[key]}-x"}
        elif self.deficit == "foreign_write":
            name, args = _foreign_write(meta["domain"], task)
            actions.insert(writes[-1] + 1, type(actions[0])(action_id="injected", name=name, arguments=args))
        self._turns = gold_turns(task, {t["function"]["name"] for t in info["tools"]})

    def act(self, observation):
        return self._turns.pop(0) if self._turns else "Thank you, goodbye."


def _target_tasks(domain: str, n: int | None) -> list[str]:
    """Tasks with two or more gold writes, each on its own (tool, record), the first with a perturbable argument."""
    from trace_envs.tau2.tasks import load_task_set
    from trace_train.analysis.tau2_labeler import ENTITY_KEYS, _write_tools

    out = []
    for tid, task in load_task_set(domain, "bundled").tasks.items():
        writes = [task.evaluation_criteria.actions[i] for i in _gold_writes(task, _write_tools())]
        keys = {(a.name, next((str(a.arguments[k]) for k in ENTITY_KEYS if k in a.arguments), "")) for a in writes}
        if len(writes) >= 2 and len(keys) == len(writes) and _perturbable(writes[0]):
            out.append(tid)
    return out[:n]


def _target_records(domain: str, task_ids: list[str], deficits) -> list[TrajectoryRecord]:
    from trace_envs.tau2.policies import run_episode
    from trace_train.analysis.tau2_labeler import _write_tools

    env_id = f"trace/tau2-{domain}-v0"
    env = _ENVS.setdefault(env_id, gym.make(env_id))
    return [run_episode(env, GoldWithDeficit(d, _write_tools()), 0, options={"task_id": tid}, env_id=env_id)
            for tid in task_ids for d in deficits]


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_target_records_labels_recover_injected_deficits(domain):
    """On trace/tau2-<domain>-v0 records (gold from tau2's task file): gold replay lacks nothing; each injected
    deficit is labeled LACKING for its capability only, and tau2's own reward says the episode failed."""
    tasks = _target_tasks(domain, TARGETS_PER_DOMAIN)
    assert len(tasks) == TARGETS_PER_DOMAIN
    recs = _target_records(domain, tasks, [None, *TARGET_DEFICITS])
    assert auto_domain(recs) == "tau2"
    labels = clean(recs).labels
    for r in recs:
        deficit = r.policy if r.policy != "gold" else None
        assert (r.reward == 1.0) == (deficit is None), (r.episode_id, r.reward)
        lacking = {cap for cap in REAL if labels[(r.episode_id, cap)] is Label.LACKING}
        assert lacking == ({TARGET_DEFICITS[deficit]} if deficit else set()), (r.episode_id, lacking)
        assert labels[(r.episode_id, "structured_data_reasoning")] is Label.NA  # no candidates in the gold
        assert labels[(r.episode_id, "multi_step_task_completion")] is not Label.NA  # >= 2 gold writes


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_target_gold_replay_lacks_nothing_on_every_task(domain):
    """Gold replay of every task in the task file scores 1.0 and is labeled LACKING for nothing (target gold
    lists no reads, several writes on one record, or none at all: none of that reads as a deficit)."""
    from trace_envs.tau2.tasks import load_task_set

    recs = _target_records(domain, list(load_task_set(domain, "bundled").tasks), [None])
    labels = clean(recs).labels
    assert all(r.reward == 1.0 for r in recs)
    assert not [key for key, label in labels.items() if label is Label.LACKING]
