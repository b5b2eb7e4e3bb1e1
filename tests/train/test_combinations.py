"""The capability-combination table and the best per-episode choice, on real retail-sim episodes played by
the scripted expert with a deficit (the "base") and with one deficit removed (an "adapter")."""

from __future__ import annotations

import random

import pytest

import trace_envs  # noqa: F401  (registers the envs)
from trace_envs.records import task_capabilities
from trace_envs.retail_sim import ENV_ID, ExpertKnobs, ScriptedExpert, split_seeds
from trace_train.evaluation.combinations import NONE, SEVERAL, combination_table
from trace_train.rollout.base import EpisodeRequest
from trace_train.rollout.scripted import ScriptedRolloutBackend

BASE = ExpertKnobs(precondition=1.0, structured=1.0, multi_step=0.0, precision=0.0)
FIXES_PRECONDITION = ExpertKnobs(precondition=0.0, structured=1.0)
FIXES_STRUCTURED = ExpertKnobs(precondition=1.0, structured=0.0)


def play(knobs: ExpertKnobs, seeds: list[int], name: str, trials: int = 1):
    backend = ScriptedRolloutBackend(lambda s: ScriptedExpert(knobs, seed=s, name=name))
    return backend.rollout([EpisodeRequest(ENV_ID, seed=seed, sample_seed=seed * 10 + t)
                            for seed in seeds for t in range(trials)])


@pytest.fixture(scope="module")
def records():
    seeds = split_seeds("test", 60)
    return {"base": play(BASE, seeds, "base"), "precondition": play(FIXES_PRECONDITION, seeds, "precondition"),
            "structured": play(FIXES_STRUCTURED, seeds, "structured")}


def caps_of(record) -> tuple[str, ...]:
    return tuple(sorted(task_capabilities(record.info) or ()))


def test_cells_count_every_policys_successes_and_the_best_choice(records):
    t = combination_table(records, ["base", "precondition", "structured"])
    assert t.n == 60 and sum(c.n for c in t.cells) == 60
    assert [c.n for c in t.cells] == sorted((c.n for c in t.cells), reverse=True)
    by_seed = {name: {r.seed: r for r in rows} for name, rows in records.items()}
    for cell in t.cells:
        seeds = [s for s, r in by_seed["base"].items() if caps_of(r) == cell.capabilities]
        assert len(seeds) == cell.n
        for name in records:
            assert cell.successes[name] == sum(by_seed[name][s].success for s in seeds)
        assert cell.best_choice == sum(any(by_seed[n][s].success for n in records) for s in seeds)
        assert max(cell.successes.values()) <= cell.best_choice <= sum(cell.successes.values())
    # The deficits are real: each fix wins its own single-capability tasks, and the per-episode choice over
    # the two fixes beats either alone overall.
    cells = {c.capabilities: c for c in t.cells}
    pre, struct = ("precondition_verification",), ("structured_data_reasoning",)
    assert cells[pre].successes["precondition"] > cells[pre].successes["base"]
    assert cells[struct].successes["structured"] > cells[struct].successes["base"]
    assert t.best_choice > max(t.total(p) for p in records)
    multi_n, multi = t.multi_capability()
    assert multi_n == sum(c.n for c in t.cells if len(c.capabilities) >= 2) and multi_n > 0
    assert set(multi) == set(records)


def test_pairing_is_by_seed_not_by_file_order_and_keeps_common_seeds_only(records):
    reference = combination_table(records, ["base", "structured"]).to_dict()
    shuffled = dict(records)
    shuffled["structured"] = random.Random(0).sample(records["structured"], len(records["structured"]))
    assert combination_table(shuffled, ["base", "structured"]).to_dict() == reference
    short = dict(records)
    short["precondition"] = records["precondition"][:45]
    assert combination_table(short, ["base"]).n == 45


def test_trials_pair_in_order_within_a_seed():
    seeds = split_seeds("test", 8)
    recs = {"base": play(BASE, seeds, "base", trials=3), "structured": play(FIXES_STRUCTURED, seeds, "s", trials=3)}
    t = combination_table(recs, ["base", "structured"])
    assert t.n == 24
    assert t.total("base") == sum(r.success for r in recs["base"])


def test_dict_records_from_disk_give_the_same_table(records):
    as_dicts = {name: [r.to_dict() for r in rows] for name, rows in records.items()}
    choice = ["base", "precondition"]
    assert combination_table(as_dicts, choice).to_dict() == combination_table(records, choice).to_dict()


def test_bad_choices_are_refused(records):
    with pytest.raises(ValueError, match="without records"):
        combination_table(records, ["base", "nope"])
    with pytest.raises(ValueError, match="at least one policy to choose"):
        combination_table(records, [])
    with pytest.raises(ValueError, match="at least one policy"):
        combination_table({}, ["base"])


def test_annotation_routing_picks_each_episodes_adapter_by_its_tasks_capabilities(records):
    t = combination_table(records, ["base", "precondition", "structured"])
    adapters = {"precondition_verification": "precondition", "structured_data_reasoning": "structured"}
    by_seed = {name: {r.seed: r for r in rows} for name, rows in records.items()}
    # by hand, per episode, for both priority orders
    expected = {}
    for order in (("precondition_verification", "structured_data_reasoning"),
                  ("structured_data_reasoning", "precondition_verification")):
        solved = 0
        for seed, record in by_seed["base"].items():
            chosen = next((adapters[c] for c in order if c in caps_of(record)), "base")
            solved += by_seed[chosen][seed].success
        expected[order] = solved
    order, solved = t.annotation_routing(adapters)
    assert solved == max(expected.values()) and expected[order] == solved
    # the router sees the task, not the outcome: never above the per-episode oracle, and it beats each fix alone
    assert solved <= t.best_choice
    assert solved > max(t.total("precondition"), t.total("structured"))
    # one adapter: its capability's tasks go to it, every other task stays on the base
    single_order, single = t.annotation_routing({"structured_data_reasoning": "structured"})
    assert single_order == ("structured_data_reasoning",)
    assert single == sum(c.successes["structured" if "structured_data_reasoning" in c.capabilities else "base"]
                         for c in t.cells)
    with pytest.raises(ValueError, match="without records"):
        t.annotation_routing({"tool_calling_precision": "precision"})


def test_by_need_groups_cells_into_nothing_one_capability_alone_and_several(records):
    t = combination_table(records, ["base", "precondition", "structured"])
    groups = t.by_need()
    labels = list(groups)
    assert labels[0] == NONE and labels[-1] == SEVERAL
    assert labels[1:-1] == sorted(labels[1:-1]) and all(" + " not in g for g in labels)
    assert sum(n for n, _ in groups.values()) == t.n
    multi_n, multi = t.multi_capability()
    assert groups[SEVERAL] == (multi_n, multi)
    by_seed = {name: {r.seed: r for r in rows} for name, rows in records.items()}
    for label in labels[1:-1]:
        seeds = [s for s, r in by_seed["base"].items() if caps_of(r) == (label,)]
        n, successes = groups[label]
        assert n == len(seeds) > 0
        assert successes == {p: sum(by_seed[p][s].success for s in seeds) for p in records}
    # the fix wins the tasks that need its capability alone
    pre = groups["precondition_verification"][1]
    assert pre["precondition"] > pre["base"]
