"""Generic distractor probes on hand-made conversations and the programmatic labeler's noise."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trace_train.analysis.labels import Capability, Label
from trace_train.analysis.probes import (
    ProgrammaticLabeler,
    capabilities_for,
    probe_asks_for_confirmation,
    probe_politeness,
    probe_transfer_when_stuck,
    register_probe,
)
from trace_train.trajectory import TrajectoryRecord


def call(cid: str, name: str, **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def rec(messages: list[dict], seed: int = 0, success: bool = True) -> TrajectoryRecord:
    return TrajectoryRecord(env_id="test/x-v0", seed=seed, messages=messages, reward=float(success),
                            success=success, termination="user_stop")


USER = {"role": "user", "content": "cancel order 17"}


def test_politeness():
    assert probe_politeness(rec([USER, {"role": "assistant", "content": "Sure, thank you!"}])) is Label.PRESENT
    assert probe_politeness(rec([USER, {"role": "assistant", "content": "Done."}])) is Label.LACKING
    assert probe_politeness(rec([USER])) is Label.NA


def test_asks_for_confirmation():
    write = {"role": "assistant", "content": "", "tool_calls": [call("c1", "cancel_pending_order", order_id="17")]}
    ask = {"role": "assistant", "content": "Do you confirm cancelling order 17?"}
    read = {"role": "assistant", "content": "", "tool_calls": [call("c0", "get_order_details", order_id="17")]}
    assert probe_asks_for_confirmation(rec([USER, read])) is Label.NA
    assert probe_asks_for_confirmation(rec([USER, ask, {"role": "user", "content": "yes"}, write])) is Label.PRESENT
    assert probe_asks_for_confirmation(rec([USER, write, ask])) is Label.LACKING


def test_transfer_when_stuck():
    def bad(cid):
        return [{"role": "assistant", "content": "", "tool_calls": [call(cid, "get_order_details", order_id="x")]},
                {"role": "tool", "tool_call_id": cid, "content": "Error: Order not found"}]

    transfer = {"role": "assistant", "content": "", "tool_calls": [call("t", "transfer_to_human_agents", summary="s")]}
    assert probe_transfer_when_stuck(rec([USER, *bad("a")])) is Label.NA
    assert probe_transfer_when_stuck(rec([USER, *bad("a"), *bad("b")])) is Label.LACKING
    assert probe_transfer_when_stuck(rec([USER, *bad("a"), *bad("b"), transfer])) is Label.PRESENT


def test_registry_per_domain_and_filtering():
    @register_probe("unit_domain", "always_lacking", "for the test")
    def _probe(record):
        return Label.LACKING

    caps = capabilities_for("unit_domain")
    names = [c.name for c in caps]
    assert names[0] == "always_lacking" and "politeness" in names
    assert [c.name for c in capabilities_for("unit_domain", include_generic=False)] == ["always_lacking"]
    with pytest.raises(KeyError):
        capabilities_for("unit_domain", names=["nope"])
    with pytest.raises(KeyError):
        capabilities_for("no_such_domain")


def test_a_capability_named_twice_is_refused():
    assert [c.name for c in capabilities_for("generic", names=["politeness"])] == ["politeness"]
    with pytest.raises(ValueError, match=r"\['politeness'\] are named more than once"):
        capabilities_for("generic", names=["politeness", "politeness"])


def _records(n: int) -> list[TrajectoryRecord]:
    return [rec([USER, {"role": "assistant", "content": "thanks" if i % 2 else "ok"}], seed=i) for i in range(n)]


def test_labeler_noise_is_seeded_per_run_and_has_the_right_rate():
    caps = capabilities_for("generic")
    records = _records(200)
    clean = ProgrammaticLabeler(caps, noise_rate=0.0).label(records, 2)
    assert clean[0].labels == clean[1].labels
    a = ProgrammaticLabeler(caps, noise_rate=0.1, seed=3).label(records, 3)
    b = ProgrammaticLabeler(caps, noise_rate=0.1, seed=3).label(records, 3)
    assert [r.labels for r in a] == [r.labels for r in b]            # same seed -> same runs
    assert a[0].labels != a[1].labels                                 # runs differ from each other
    c = ProgrammaticLabeler(caps, noise_rate=0.1, seed=4).label(records, 1)
    assert c[0].labels != a[0].labels                                 # another seed, other noise
    flips = np.mean([a[0][k] != clean[0][k] for k in clean[0]])
    assert 0.06 < flips < 0.14                                        # 600 pairs at rate 0.1


def test_labeler_rejects_capability_without_probe_and_records_probe_crash():
    with pytest.raises(ValueError):
        ProgrammaticLabeler([Capability("x", "no probe")])

    def boom(record):
        raise RuntimeError("bad record")

    runs = ProgrammaticLabeler([Capability("boom", "d", boom)], noise_rate=0.0).label(_records(2), 1)
    assert len(runs[0]) == 0 and len(runs[0].missing) == 2


def test_politeness_reads_the_closing_message_only():
    msgs = [USER, {"role": "assistant", "content": "Please confirm: cancel order 17?"},
            {"role": "user", "content": "yes"}, {"role": "assistant", "content": "Order 17 is cancelled."}]
    assert probe_politeness(rec(msgs)) is Label.LACKING
