"""Aggregation against hand-computed examples (paper §2.4)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from trace_train.analysis.aggregate import Thresholds, aggregate, candidates_table, run_stats, write_selected
from trace_train.analysis.labels import Capability, Label, LabelRun

L, P, NA = Label.LACKING, Label.PRESENT, Label.NA
A = Capability("cap_a", "a")
B = Capability("cap_b", "b")


def make_run(run: int, success: dict[str, bool], cap: str, labels: list[Label]) -> LabelRun:
    out = LabelRun(run=run)
    for eid, lab in zip(success, labels):
        out[(eid, cap)] = lab
    return out


def test_hand_computed_example():
    success = {f"f{i}": False for i in range(4)} | {f"p{i}": True for i in range(6)}
    run = make_run(0, success, "cap_a", [L, L, P, NA, L, P, P, P, NA, NA])
    s = run_stats(run, "cap_a", success, Thresholds())
    assert (s.lacking_failed, s.present_failed, s.na_failed) == (2, 1, 1)
    assert (s.lacking_passed, s.present_passed, s.na_passed) == (1, 3, 2)
    assert s.cov == pytest.approx(2 / 4)
    assert s.er_minus == pytest.approx(2 / 3)
    assert s.er_plus == pytest.approx(1 / 4)
    assert s.delta == pytest.approx(2 / 3 - 1 / 4)
    assert s.passed


def test_no_failures_gives_zero_cov_and_drop():
    success = {f"p{i}": True for i in range(5)}
    runs = [make_run(r, success, "cap_a", [L, L, P, P, P]) for r in range(10)]
    res = aggregate(runs, [A], success)
    c = res.candidates[0]
    assert c.runs[0].cov == 0.0 and c.runs[0].er_minus == 0.0
    assert c.runs[0].er_plus == pytest.approx(2 / 5)
    assert c.mean_delta == pytest.approx(-2 / 5)
    assert not c.selected and c.n_runs_passed == 0
    assert res.n_failed == 0 and res.selected == []


def test_all_na_is_dropped_as_never_applicable():
    success = {"f0": False, "f1": False, "p0": True}
    runs = [make_run(r, success, "cap_a", [NA, NA, NA]) for r in range(10)]
    c = aggregate(runs, [A], success).candidates[0]
    assert c.runs[0].cov == 0 and c.runs[0].delta == 0
    assert not c.selected
    assert "never applicable" in c.reason


def test_ties_exactly_at_thresholds_pass():
    # 10 failed: 7 LACKING, 3 PRESENT -> ER- = 0.7; 2 passed: 1 LACKING 1 PRESENT -> ER+ = 0.5.
    # Δ = 0.7 - 0.5 = 0.19999999999999996 in floats: must still pass δ = 0.2.
    success = {f"f{i}": False for i in range(10)} | {"p0": True, "p1": True}
    labels = [L] * 7 + [P] * 3 + [L, P]
    run = make_run(0, success, "cap_a", labels)
    thr = Thresholds(rho=0.7, delta=0.2, k=1)
    s = run_stats(run, "cap_a", success, thr)
    assert s.delta < 0.2  # the float artefact the epsilon exists for
    assert s.cov == pytest.approx(0.7)
    assert s.passed
    # without the tolerance the same tie would be (wrongly) rejected
    assert not run_stats(run, "cap_a", success, Thresholds(rho=0.7, delta=0.2, k=1, epsilon=0.0)).delta_ok
    # a genuinely lower value still fails: ρ just above Cov, δ just above Δ
    assert not run_stats(run, "cap_a", success, Thresholds(rho=0.71, delta=0.2, k=1)).passed
    assert not run_stats(run, "cap_a", success, Thresholds(rho=0.7, delta=0.21, k=1)).passed


def test_consistency_k_of_n_and_ranking():
    success = {f"f{i}": False for i in range(5)} | {f"p{i}": True for i in range(5)}
    strong = [L, L, L, L, P] + [P] * 5          # Δ = 0.8, Cov = 0.8
    weak = [L, P, P, P, P] + [P] * 5            # Δ = 0.2, Cov = 0.2 (passes at tie)
    flat = [L, L, P, P, P] + [L, L, P, P, P]    # Δ = 0
    runs = []
    for r in range(10):
        run = LabelRun(run=r)
        # cap_a passes 8 runs (strong) and fails 2 (flat); cap_b passes 7 runs (weak) and fails 3
        for eid, lab in zip(success, strong if r < 8 else flat):
            run[(eid, "cap_a")] = lab
        for eid, lab in zip(success, weak if r < 7 else flat):
            run[(eid, "cap_b")] = lab
        runs.append(run)
    res = aggregate(runs, [B, A], success)
    by = {c.name: c for c in res.candidates}
    assert by["cap_a"].n_runs_passed == 8 and by["cap_a"].selected
    assert by["cap_b"].n_runs_passed == 7 and not by["cap_b"].selected
    assert "passed 7/10" in by["cap_b"].reason and "Δ<0.2 in 3" in by["cap_b"].reason
    assert by["cap_a"].mean_delta == pytest.approx(0.8 * 0.8)
    assert by["cap_a"].std_delta == pytest.approx(0.32)  # population std of 8×0.8, 2×0.0
    assert by["cap_a"].mean_cov == pytest.approx((8 * 0.8 + 2 * 0.4) / 10)
    assert by["cap_a"].example_failed_cases == ["f0", "f1", "f2", "f3"]
    # with K=7 both are kept, ranked by mean Δ
    res7 = aggregate(runs, [B, A], success, Thresholds(k=7))
    assert [c.name for c in res7.selected] == ["cap_a", "cap_b"]


def test_missing_pairs_are_excluded_and_counted(tmp_path):
    success = {"f0": False, "f1": False, "p0": True}
    run = LabelRun(run=0)
    run[("f0", "cap_a")] = L
    run[("p0", "cap_a")] = P
    run.mark_missing([("f1", "cap_a")])
    res = aggregate([run], [A], success, Thresholds(k=1))
    s = res.candidates[0].runs[0]
    assert s.missing == 1 and s.cov == 1.0 and s.delta == 1.0
    assert res.missing_pairs == 1
    doc = json.loads(write_selected(res, tmp_path / "sel.json").read_text())
    assert doc["missing_pairs"] == {"total": 1, "by_run": {"0": 1}}
    assert doc["selected"][0]["name"] == "cap_a" and doc["selected"][0]["status"] == "PENDING"
    cand = doc["candidates"][0]
    assert cand["keep"] is True and cand["per_run"][0]["passed"] is True
    console = Console(record=True, width=200)
    console.print(candidates_table(res))
    text = console.export_text()
    assert "cap_a" in text and "kept" in text and "1 unlabeled" in text


def test_partition_lists_cover_every_episode():
    success = {"f0": False, "p0": True, "p1": True}
    run = make_run(0, success, "cap_a", [L, NA, P])
    part = run.to_partition(success, ["cap_a"])["labels"]["cap_a"]
    assert part["lacking_failed"] == ["f0"] and part["na_passed"] == ["p0"] and part["present_passed"] == ["p1"]
    assert sum(len(v) for v in part.values()) == 3


def test_label_parse_aliases():
    assert Label.parse("n/a") is NA and Label.parse(" present ") is P and Label.parse("Lacking") is L
    assert Label.parse("maybe") is None and Label.parse(3) is None


def test_no_passed_trajectories_warns_and_flags_missing_contrast(caplog):
    from trace_train.analysis.aggregate import aggregate
    from trace_train.analysis.labels import Capability, Label, LabelRun

    success = {"a": False, "b": False}
    run = LabelRun(run=0, labels={("a", "x"): Label.LACKING, ("b", "x"): Label.PRESENT})
    with caplog.at_level("WARNING"):
        result = aggregate([run], [Capability("x", "d")], success)
    assert "no contrast" in caplog.text
    assert result.to_json()["contrast_available"] is False


def test_thin_er_plus_support_is_flagged_without_changing_the_selection(tmp_path, caplog):
    # 10 failed (8 LACKING, 2 PRESENT) in every run; the passed episodes are NA except `labeled` of them.
    failed = {f"f{i}": False for i in range(10)}
    passed = {f"p{i}": True for i in range(20)}
    success = failed | passed

    def runs(labeled: int) -> list[LabelRun]:
        labels = [L] * 8 + [P] * 2 + [P] * labeled + [NA] * (20 - labeled)
        return [make_run(r, success, "cap_a", labels) for r in range(10)]

    with caplog.at_level("WARNING"):
        thin = aggregate(runs(2), [A], success).candidates[0]
    assert thin.er_plus_support == [2] * 10 and thin.thin_er_plus_support
    assert thin.selected and thin.n_runs_passed == 10  # Δ = 0.8 - 0 passes; only the flag is added
    assert "median of 2 labeled passed" in thin.reason and "cap_a" in caplog.text

    caplog.clear()
    with caplog.at_level("WARNING"):
        ample = aggregate(runs(10), [A], success)
    c = ample.candidates[0]
    assert c.er_plus_support == [10] * 10 and not c.thin_er_plus_support
    assert "label noise" not in c.reason and "ER+" not in caplog.text
    doc = json.loads(write_selected(ample, tmp_path / "sel.json").read_text())
    assert doc["candidates"][0]["er_plus_support"] == {"min": 10, "median": 10.0, "max": 10}
    assert doc["candidates"][0]["thin_er_plus_support"] is False


def test_a_capability_never_applicable_on_failures_is_not_flagged():
    success = {"f0": False, "p0": True}
    runs = [make_run(r, success, "cap_a", [NA, NA]) for r in range(10)]
    assert not aggregate(runs, [A], success).candidates[0].thin_er_plus_support


@pytest.mark.parametrize("never", ["missing", "na"])
def test_a_capability_never_labeled_is_never_selected_even_at_zero_thresholds(never):
    success = {"e1": False, "e2": False, "e3": True}
    runs = []
    for r in range(2):
        run = make_run(r, success, "cap_a", [L, P, P])
        if never == "missing":
            run.mark_missing([(e, "cap_b") for e in success])  # the labeler never answered these
        else:
            for e in success:
                run[(e, "cap_b")] = NA
        runs.append(run)
    res = aggregate(runs, [A, B], success, Thresholds(rho=0.0, delta=0.0, k=2))
    a, b = res.candidates
    assert a.selected and not b.selected and [c.name for c in res.selected] == ["cap_a"]
    assert b.n_runs_passed == 2 and "never applicable" in b.reason and "no LACKING or PRESENT" in b.reason
    assert [c["name"] for c in res.to_json()["selected"]] == ["cap_a"]


@pytest.mark.parametrize("k", [0, -1])
def test_thresholds_refuse_k_below_one(k):
    with pytest.raises(ValueError, match="k must be >= 1"):
        Thresholds(k=k)


def test_aggregate_refuses_an_empty_success_map():
    run = make_run(0, {"e1": False}, "cap_a", [L])
    with pytest.raises(ValueError, match="success .* is empty"):
        aggregate([run], [A], {}, Thresholds(k=1))


def test_aggregate_refuses_a_capability_given_twice():
    success = {"e1": False, "e2": True}
    run = make_run(0, success, "cap_a", [L, P])
    with pytest.raises(ValueError, match=r"\['cap_a'\] are given more than once"):
        aggregate([run], [A, A], success, Thresholds(k=1))
