"""The replication's tables and goals from evaluated rows: aggregation over seeds, row order, goal verdicts."""

import math

import pytest

from trace_train.evaluation.replication_table import PolicyRow, aggregate, build_tables, goals, headline

TRACE = "TRACE (composed)"


def _result(rate: float, n: int = 1000, low: float | None = None, high: float | None = None) -> dict:
    half = 1.96 * math.sqrt(rate * (1 - rate) / n)
    return {"overall": {"rate": rate, "n": n, "low": rate - half if low is None else low,
                        "high": rate + half if high is None else high}, "mean_reward": rate}


def _rows(spec: dict[str, list[float]], table: str = "main", seeded: bool = True) -> list[PolicyRow]:
    return [PolicyRow(table, name, seed if seeded and len(rates) > 1 else None, _result(rate))
            for name, rates in spec.items() for seed, rate in enumerate(rates)]


def test_aggregate_is_mean_and_sample_sd_over_seeds():
    agg = aggregate(_rows({"x": [0.2, 0.3, 0.4]}))
    assert agg["mean"] == pytest.approx(0.3)
    assert agg["std"] == pytest.approx(0.1)  # sample sd of 0.2, 0.3, 0.4
    assert (agg["min"], agg["max"], agg["n_seeds"]) == (0.2, 0.4, 3)
    assert [p["seed"] for p in agg["per_seed"]] == [0, 1, 2]
    assert aggregate(_rows({"y": [0.5]}))["std"] == 0.0


def test_main_table_order_and_goals_met():
    rows = _rows({"base": [0.2], "prompted": [0.21]}, seeded=False) + _rows({
        TRACE: [0.40, 0.42, 0.44], "precondition_verification": [0.30, 0.31, 0.29],
        "multi_step_task_completion": [0.25, 0.26, 0.27], "mixture": [0.33, 0.3, 0.31], "sft": [0.22, 0.2, 0.21],
        "grpo_target": [0.25, 0.24, 0.26], "grpo_target_4x": [0.38, 0.4, 0.39], "task-level router": [0.3, 0.3, 0.3],
        "TRACE (gates by GRPO on the target)": [0.41, 0.4, 0.39]})
    tables = build_tables(rows, {}, {"TRACE": 1920, "grpo_target": 1920, "grpo_target_4x": 7680},
                          seeds=[0, 1, 2], n_adapters=2)
    assert list(tables["main"]) == ["base", "prompted", "grpo_target", "grpo_target_4x", "precondition_verification",
                                    "multi_step_task_completion", "mixture", "sft", "task-level router", TRACE,
                                    "TRACE (gates by GRPO on the target)"]
    assert tables["main"][TRACE]["rollouts"] == 1920 and tables["main"]["grpo_target_4x"]["rollouts"] == 7680
    verdicts = [g["met"] for g in tables["goals"]]
    assert verdicts == [True, True, True, True], tables["goals"]


def test_goals_not_met_and_not_measured():
    main = build_tables(_rows({"base": [0.3]}, seeded=False) + _rows({TRACE: [0.35, 0.36], "p": [0.4, 0.4],
                                                                      "mixture": [0.5, 0.5]}),
                        {}, {"TRACE": 100}, seeds=[0, 1], n_adapters=1)["main"]
    got = {g["goal"]: g for g in goals(main, {"TRACE": 100})}
    assert got["TRACE >= base + 0.15"]["met"] is False
    assert "+0.055" in got["TRACE >= base + 0.15"]["detail"]
    assert got["TRACE > the best single adapter"]["met"] is False
    assert got["TRACE > the mixture adapter and > SFT"]["met"] is None  # no SFT row
    assert got["TRACE reaches GRPO-on-target's final score with <= 1/4 of its rollouts"]["met"] is None
    # more rollouts than a quarter of the 4x run: not met even with a higher score
    both = build_tables(_rows({"base": [0.1]}, seeded=False) + _rows({TRACE: [0.5], "grpo_target_4x": [0.4]}),
                        {}, {}, seeds=[0], n_adapters=1)["main"]
    last = goals(both, {"TRACE": 300, "grpo_target_4x": 1000})[-1]
    assert last["met"] is False


def test_a_goal_met_exactly_is_met():
    # 7 of 20 vs 4 of 20: exactly +0.15 (0.35 - 0.2 is 0.14999999999999997 in floating point); the same score as
    # the 4x run with a quarter of its rollouts
    main = build_tables(_rows({"base": [4 / 20]}, seeded=False) + _rows({TRACE: [7 / 20], "grpo_target_4x": [7 / 20]}),
                        {}, {}, seeds=[0], n_adapters=1)["main"]
    got = {g["goal"]: g for g in goals(main, {"TRACE": 100, "grpo_target_4x": 400})}
    assert got["TRACE >= base + 0.15"]["met"] is True
    assert got["TRACE reaches GRPO-on-target's final score with <= 1/4 of its rollouts"]["met"] is True
    below = build_tables(_rows({"base": [4 / 20]}, seeded=False) + _rows({TRACE: [0.349]}), {}, {}, seeds=[0],
                         n_adapters=1)["main"]
    assert goals(below, {"TRACE": 100})[0]["met"] is False


def test_the_episode_router_row_gets_its_own_goal_lines_after_traces():
    rows = _rows({"base": [0.2]}, seeded=False) + _rows({
        TRACE: [0.25, 0.26], "TRACE (episode router)": [0.40, 0.41], "structured_data_reasoning": [0.3, 0.3],
        "mixture": [0.3, 0.31], "sft": [0.33, 0.32]})
    tables = build_tables(rows, {}, {"TRACE": 100}, seeds=[0, 1], n_adapters=1)
    assert list(tables["main"])[-2:] == [TRACE, "TRACE (episode router)"]
    assert tables["main"]["TRACE (episode router)"]["rollouts"] == 100
    names = [g["goal"] for g in tables["goals"]]
    assert names[:4] == ["TRACE >= base + 0.15", "TRACE > the best single adapter",
                         "TRACE > the mixture adapter and > SFT",
                         "TRACE reaches GRPO-on-target's final score with <= 1/4 of its rollouts"]
    assert names[4:] == [f"TRACE (episode router): {n}" for n in names[:4]]
    verdicts = [g["met"] for g in tables["goals"]]
    assert verdicts[:3] == [False, False, False] and verdicts[4:7] == [True, True, True]
    assert "0.405" in tables["goals"][4]["detail"]  # the episode router's own mean, not TRACE's
    # with its routing episodes recorded, the row and its 1/4-rollout goal use its own budget
    routed = build_tables(rows + _rows({"grpo_target_4x": [0.35, 0.36]}), {},
                          {"TRACE": 100, "TRACE (episode router)": 400, "grpo_target_4x": 1000},
                          seeds=[0, 1], n_adapters=1)
    assert routed["main"]["TRACE (episode router)"]["rollouts"] == 400 and routed["main"][TRACE]["rollouts"] == 100
    quarter = [g for g in routed["goals"] if g["goal"].endswith("with <= 1/4 of its rollouts")]
    assert [g["met"] for g in quarter] == [False, False]  # TRACE scores below; the router uses 400 > 1000 / 4
    assert "with 400 rollouts" in quarter[1]["detail"] and "with 100 rollouts" in quarter[0]["detail"]


def test_routing_and_scale_tables_include_trace_itself():
    rows = (_rows({TRACE: [0.4, 0.5]}) + _rows({"top-2": [0.38, 0.44], "top-4": [0.3, 0.36]}, table="routing")
            + _rows({"TRACE, 1 adapters": [0.3, 0.32]}, table="scale")
            + _rows({"prompted, 1 descriptions": [0.2], "prompted, 2 descriptions": [0.21]}, table="scale",
                    seeded=False))
    tables = build_tables(rows, {"TRACE": [{"rollouts": 64, "rate": 0.3, "low": 0.2, "high": 0.4}]}, {},
                          seeds=[0, 1], n_adapters=2)
    assert list(tables["routing"]) == ["top-1", "top-2", "top-4"]
    assert tables["routing"]["top-1"]["mean"] == pytest.approx(0.45)
    assert [row["k"] for row in tables["scale"]] == [1, 2]
    assert tables["scale"][1]["trace"]["mean"] == pytest.approx(0.45)  # k = all adapters is TRACE
    assert tables["scale"][0]["prompted"]["mean"] == pytest.approx(0.2)
    assert tables["efficiency"]["TRACE"][0]["rollouts"] == 64


def test_headline_needs_the_margin_and_separated_intervals():
    base = _result(0.2, low=0.17, high=0.23)
    assert headline({"base": base, TRACE: _result(0.35, low=0.31, high=0.39)}).startswith("Met:")
    overlapping = headline({"base": base, TRACE: _result(0.31, low=0.22, high=0.40)})
    assert overlapping.startswith("Not met:") and "overlapping" in overlapping
    assert headline({"base": base, TRACE: _result(0.25, low=0.24, high=0.26)}).startswith("Not met:")
    # 144 vs 94 successes of 500: exactly +0.10 (0.188 + 0.1 is 0.28800000000000003 in floating point)
    exact = headline({"base": _result(94 / 500, n=500), TRACE: _result(144 / 500, n=500)})
    assert exact.startswith("Met:") and "+0.100" in exact
    assert headline({"base": _result(94 / 500, n=500), TRACE: _result(143 / 500, n=500)}).startswith("Not met:")
    assert headline({"base": base}).startswith("Not measured: this run has no composed (TRACE) model")
    assert headline({TRACE: base}) is None


@pytest.mark.parametrize("with_trace, label", [(True, "not met"), (False, "not measured")])
def test_the_report_banner_names_the_verdict(with_trace, label):
    from types import SimpleNamespace

    from trace_train.report.loaders import Loaded
    from trace_train.report.sections_replication import headline_banner

    policies = {"base": _result(0.2, low=0.17, high=0.23)}
    if with_trace:
        policies[TRACE] = _result(0.21, low=0.18, high=0.24)
    html = headline_banner(SimpleNamespace(eval=Loaded("eval/eval.json", {"policies": policies})))
    assert html.startswith('<p class="headline">') and f">{label}<" in html
    assert headline_banner(SimpleNamespace(eval=Loaded("eval/eval.json"))) == ""
