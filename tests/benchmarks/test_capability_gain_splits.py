"""benchmarks/capability_gain.py: the target's tasks a capability needs alone, and a family env's success by case."""

from trace_envs.records import TrajectoryRecord, write_trajectories


def _record(seed: int, success: bool, required: list[str], case: str | None = None, kind: str | None = None):
    task = {"required_capabilities": required, "intents": [{"kind": kind}] if kind else []}
    info = {"task": task, **({"case": case} if case else {})}
    return TrajectoryRecord("trace/x-v0", seed, [], float(success), success, "done", policy="p", info=info)


def test_alone_counts_only_tasks_that_need_nothing_else(tmp_path, load_benchmark):
    gain = load_benchmark("capability_gain")
    write_trajectories(tmp_path / "trajectories_p.jsonl", [
        _record(0, True, ["precondition_verification"]),
        _record(1, False, ["precondition_verification"]),
        _record(2, True, ["precondition_verification", "multi_step_task_completion"]),  # needs another one too
        _record(3, True, []),
        _record(4, False, ["multi_step_task_completion"]),
    ])
    alone = gain.alone_rate(tmp_path, "p", "precondition_verification")
    assert (alone.successes, alone.n) == (1, 2)
    need, rest = gain.split_by_requirement(tmp_path, "p", "precondition_verification")
    assert (need.successes, need.n, rest.successes, rest.n) == (2, 3, 1, 2)


def test_cases_are_grouped_with_the_first_requests_kind(tmp_path, load_benchmark):
    gain = load_benchmark("capability_gain")
    write_trajectories(tmp_path / "trajectories_p.jsonl", [
        _record(0, True, [], "status", "cancel"), _record(1, False, [], "status", "cancel"),
        _record(2, False, [], "status", "return"), _record(3, True, [], "allow", "cancel"),
        _record(4, True, []),  # an env without cases or requests
    ])
    cases = {group: (rate.successes, rate.n) for group, rate in gain.rates_by_case(tmp_path, "p").items()}
    assert cases == {"status/cancel": (1, 2), "status/return": (0, 1), "allow/cancel": (1, 1), "-": (1, 1)}
