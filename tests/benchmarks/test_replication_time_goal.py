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
