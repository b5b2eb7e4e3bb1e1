"""The replication benchmark's run-time goal judges only a run that covers what ``preset=replication`` trains:
a partial run (fewer seeds, ablation tables missing) is "not measured", whatever its time."""

def _tables(seeds, routing, scale, efficiency):
    return {"seeds": seeds, "routing": {k: {} for k in routing}, "scale": scale, "efficiency": efficiency}


def test_missing_parts_of_the_preset(load_benchmark):
    missing = load_benchmark("miniature_replication").missing_from_preset
    whole = _tables([0, 1, 2], ["top-1", "top-2", "top-4"], [{"k": 1}], {"TRACE": [{}], "grpo_target_4x": [{}]})
    assert missing(whole) == []
    seed_zero_main_table = _tables([0], ["top-1"], [], {})
    assert missing(seed_zero_main_table) == [
        "run seeds [1, 2]", "routing rows ['top-2', 'top-4']", "the capabilities-scale table",
        "TRACE's sample-efficiency curve"]
    assert missing(_tables([0, 2], ["top-1", "top-2", "top-4"], [{"k": 1}], {"TRACE": [{}]})) == ["run seeds [1]"]


def test_run_time_counts_stages_that_ran_at_once_once(load_benchmark):
    minutes = load_benchmark("miniature_replication").run_minutes
    # two workers: 0-60 s and 30-120 s overlap; a stage resumed after a pause (its two parts); one old record
    stages = {"a": {"spans": [[0.0, 60.0]], "wall_s": 60.0}, "b": {"spans": [[30.0, 120.0]], "wall_s": 90.0},
              "c": {"spans": [[200.0, 230.0], [500.0, 530.0]], "wall_s": 60.0},
              "old": {"wall_s": 120.0}, "running": {"spans": [], "wall_s": 0.0}}
    assert minutes(stages) == (120.0 + 60.0 + 120.0) / 60
    # sequential stages: the sum of their walls
    assert minutes({"a": {"spans": [[0.0, 60.0]]}, "b": {"spans": [[60.0, 90.0]]}}) == 1.5
