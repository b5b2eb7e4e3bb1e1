"""The four capability families on the τ² domains (``domain="tau2-airline" | "tau2-retail"``).

Oracle 1.0, knob isolation per episode (a knob at 1.0 fails exactly the tasks that need it), check_env,
determinism, tau2's own DB hash, each precondition case checked against tau2's tools and DB, and the
calibration with the scripted expert landing in the gate for every (family, domain) pair. The per-pair
sweeps are ``slow`` (they still run in ``scripts/test.sh``); one representative pair runs fast. The
500-seed oracle sweep and the full-size calibration run in ``benchmarks/tau2_families.py``.
"""

import json
import warnings
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import trace_envs  # noqa: F401
from trace_envs.domains import get_domain
from trace_envs.episode import play_scripted
from trace_envs.families import FAMILIES, FamilyExpert, play
from trace_envs.retail_sim.experts import CAPABILITY_TO_KNOB
from trace_envs.synthesis.calibrate import domain_ladder
from trace_envs.tau2.runtime import tau2_available

pytestmark = [pytest.mark.tau2, pytest.mark.skipif(not tau2_available(), reason="the real tau2 package is missing")]

DOMAINS = ("tau2-airline", "tau2-retail")
CAPS = sorted(FAMILIES)
KNOBS = ("precondition", "structured", "multi_step", "precision")
PAIRS = [(c, d) for d in DOMAINS for c in CAPS]


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{c}@{d}" for c, d in PAIRS])
def family(request):
    cap, domain = request.param
    return cap, domain, gym.make(f"trace/{cap}-v0", domain=domain)


def needs(cap: str, knob: str, task: dict) -> bool:
    """Whether a task of family ``cap`` needs the capability behind ``knob``."""
    if knob != CAPABILITY_TO_KNOB[cap]:
        return False
    return task["case"] != "allow" if cap == "precondition_verification" else True


def _oracle_and_knob_isolation(cap, domain, env, n_oracle, n_knob):
    cases = set()
    for seed in range(n_oracle):
        reward, info = play(env, FamilyExpert(), seed)
        assert reward == 1.0 and info["success"], (cap, domain, seed, info.get("reward_breakdown"), info["termination"])
        task = info["task"]
        assert task["domain"] == domain and task["capability"] == cap
        cases.add(task["case"])
    assert len(cases) >= 2, cases
    for knob in KNOBS:
        for seed in range(100, 100 + n_knob):
            reward, info = play(env, FamilyExpert({knob: 1.0}, seed=1), seed)
            assert (reward < 1.0) == needs(cap, knob, info["task"]), (cap, domain, knob, seed, info["task"]["case"])


@pytest.mark.slow
def test_oracle_and_knob_isolation_per_episode(family):
    _oracle_and_knob_isolation(*family, n_oracle=50, n_knob=16)


def test_oracle_and_knob_isolation_representative():
    """The fast stand-in for the per-pair sweep: airline precondition (every airline policy rule)."""
    cap, domain = "precondition_verification", "tau2-airline"
    _oracle_and_knob_isolation(cap, domain, gym.make(f"trace/{cap}-v0", domain=domain), n_oracle=12, n_knob=6)


def test_check_env_and_determinism(family):
    cap, domain, env = family
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    expert = {k: 0.5 for k in KNOBS}
    runs = []
    for seed in (7, 7, 8):
        obs, info = env.reset(seed=seed)
        reward, _ = play(env, FamilyExpert(expert, seed=3), seed)
        runs.append((json.dumps(obs), json.dumps(info, sort_keys=True), reward, json.dumps(env.unwrapped.transcript)))
    assert runs[0] == runs[1] and runs[0][1] != runs[2][1]


@pytest.mark.parametrize("domain", DOMAINS)
def test_tau2_tools_policy_and_hash(domain):
    """The family episode keeps tau2's tool schemas and policy; cheap state equality == tau2's DB hash."""
    from trace_envs.tau2.domain import Tau2Domain

    native = Tau2Domain(domain.removeprefix("tau2-"))
    env = gym.make("trace/multi_step_task_completion-v0", domain=domain)
    obs, info = env.reset(seed=3)
    assert info["tools"] == native.tool_schemas and info["system_prompt"] == native.system_prompt
    play(env, FamilyExpert({"multi_step": 1.0}), 3)
    episode = env.unwrapped._episode
    d = episode.domain
    assert d.db_hash(episode.gold_db) != d.db_hash(episode.initial_db) == native.new_world().db_hash()
    assert not d.same_state(episode.db, episode.gold_db)
    assert d.db_hash(d.replay(episode.initial_db, episode.gold_actions)) == d.db_hash(episode.gold_db)
    play(env, FamilyExpert(), 3)
    episode = env.unwrapped._episode
    assert d.same_state(episode.db, episode.gold_db) and d.db_hash(episode.db) == d.db_hash(episode.gold_db)


def _tool(env, name, args):
    return env.unwrapped._episode.tools.call(name, args)


@pytest.mark.parametrize("domain", DOMAINS)
def test_precondition_cases_hold_in_tau2_db(domain):
    """Every refusal case is what the domain's policy text says, checked with tau2's own tools."""
    from trace_envs.domains.tau2_airline import cancellable

    env = gym.make("trace/precondition_verification-v0", domain=domain)
    seen = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        task = info["task"]
        spec, case = task["requests"][0], task["case"]
        seen.add(case)
        ident = _tool(env, *task["identify"])
        assert ident.error == (case == "authentication"), (seed, case, ident.output)
        record = json.loads(_tool(env, *spec["lookup"]).output)
        assert (record["user_id"] != task["user_id"]) == (case == "ownership")
        if case == "status":  # tau2's tool itself rejects the write
            assert _tool(env, *spec["write"]).output.startswith("Error")
        if domain == "tau2-airline" and spec["kind"] == "cancel":
            assert cancellable(record, spec["facts"]["reason"]) == (case != "policy")
        if domain == "tau2-airline" and spec["kind"] == "bags":
            assert (spec["facts"]["total"] < record["total_baggages"]) == (case == "policy")
        if domain == "tau2-airline" and spec["kind"] == "change_flight":
            assert (record["cabin"] == "basic_economy") == (case == "policy")
    assert seen == set(get_domain(domain).guard_cases)


def test_airline_basic_economy_rule_in_tau2_db():
    """Policy: "Basic economy flights cannot be modified" (tau2's tools do not enforce it). A policy case
    on a flight change is a basic-economy reservation of the user, whose change tau2 accepts; an allowed
    flight change is on a non-basic-economy reservation and tau2 accepts the gold write too. The oracle
    refuses naming the rule; the expert lacking the capability changes the flights and scores 0."""
    env = gym.make("trace/precondition_verification-v0", domain="tau2-airline")
    seen = {"policy": 0, "allow": 0}
    for seed in range(60):
        _, info = env.reset(seed=seed, options={"case": "policy" if seed % 2 else "allow"})
        task = info["task"]
        spec = task["requests"][0]
        if spec["kind"] != "change_flight":
            continue
        case = task["case"]
        seen[case] += 1
        assert task["gold"]["requests"][0].get("rule") == ("basic_economy" if case == "policy" else None)
        record = json.loads(_tool(env, *spec["lookup"]).output)
        assert record["user_id"] == task["user_id"] and record["cabin"] == spec["write"][1]["cabin"]
        assert (record["cabin"] == "basic_economy") == (case == "policy")
        dates = [f["date"] for f in spec["write"][1]["flights"]]
        assert all(new > old["date"] for new, old in zip(dates, record["flights"]))
        changed = _tool(env, *spec["write"])
        assert not changed.error, changed.output  # unenforced: tau2 changes the flights of any cabin
        assert [f["date"] for f in json.loads(changed.output)["flights"]] == dates
        oracle = play_scripted(env, FamilyExpert(), seed, options={"case": case})
        assert oracle.reset_info["task"] == task and oracle.reward == 1.0
        texts = " ".join(m.get("content") or "" for m in oracle.transcript if m["role"] == "assistant")
        assert ("basic economy flights cannot be modified" in texts) == (case == "policy")
        lacking = play_scripted(env, FamilyExpert({"precondition": 1.0}), seed, options={"case": case})
        assert lacking.reward == (0.0 if case == "policy" else 1.0)
    assert seen["policy"] >= 3 and seen["allow"] >= 3, seen


@pytest.mark.parametrize("domain", DOMAINS)
def test_selection_target_is_unique_in_tau2_db(domain):
    env = gym.make("trace/structured_data_reasoning-v0", domain=domain, n_constraints=3)
    for seed in range(15):
        _, info = env.reset(seed=seed, options={"case": "selection"})
        gold = info["task"]["gold"]["requests"][0]
        spec = info["task"]["requests"][0]
        assert gold["target"] not in gold["decoys"] and spec["wrong"] != spec["write"]
        assert len(gold["constraints"]) >= 1


def _default_synthesis():
    from trace_envs.synthesis import SynthesisConfig

    return SynthesisConfig.from_dict(yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "conf" / "synthesis" / "default.yaml").read_text()))


def _calibrates(cap, domain, n_seeds, group_size):
    from trace_envs.synthesis import search_knobs

    cfg = _default_synthesis()
    result = search_knobs(cap, replace(cfg, domain=domain, n_seeds=n_seeds, group_size=group_size))
    assert result.passed, (cap, domain, [(t.knobs, t.failures) for t in result.trials])
    stats = result.chosen.stats
    assert cfg.gate.reward_min <= stats.mean_reward <= cfg.gate.reward_max
    assert cfg.gate.success_min <= stats.success_rate <= cfg.gate.success_max
    return result


def test_calibration_on_tau2_lands_in_gate():
    _calibrates("tool_calling_precision", "tau2-retail", n_seeds=12, group_size=6)


# The precondition family's allowed cases are solved by every member (its knob only matters on refusals),
# so its all-success groups are the allowed share: it needs more seeds than the others to pass reliably.
CALIBRATION_SEEDS = {"precondition_verification": 24}


@pytest.mark.slow
@pytest.mark.parametrize(("cap", "domain"), PAIRS, ids=[f"{c}@{d}" for c, d in PAIRS])
def test_calibration_lands_in_gate_every_pair(cap, domain):
    """The knob search with the scripted expert (conf/synthesis/default.yaml, fewer seeds) passes the gate."""
    result = _calibrates(cap, domain, n_seeds=CALIBRATION_SEEDS.get(cap, 12), group_size=6)
    assert result.chosen.knobs in domain_ladder(cap, domain, _default_synthesis().search.candidates[cap])


@pytest.mark.parametrize("domain", DOMAINS)
def test_retail_sims_price_bound_selections_are_refused_on_tau2_domains(domain):
    assert get_domain(domain).selection_styles == ("mixed",)
    with pytest.raises(ValueError, match=f"selection_style must be one of \\('mixed',\\) on domain '{domain}'"):
        gym.make("trace/structured_data_reasoning-v0", domain=domain, selection_style="price_bound")
