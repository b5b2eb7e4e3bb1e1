"""The neutral τ² domain view: tools, write set, replay and hashes agree with tau2."""

from __future__ import annotations

import json

import pytest

from tests.tau2.conftest import requires_tau2
from trace_envs.tau2.tasks import reference_dir

pytestmark = [pytest.mark.tau2, requires_tau2]


def test_domain_replay_matches_gold_hashes_and_worlds_are_independent():
    from trace_envs.tau2.domain import Tau2Domain

    expected = json.loads((reference_dir() / "tau2_gold_db_hashes.json").read_text())["domains"]["retail"]
    d = Tau2Domain("retail", task_file="head")
    assert "cancel_pending_order" in d.write_tools and "get_order_details" not in d.write_tools
    assert {s["function"]["name"] for s in d.tool_schemas} >= d.write_tools
    tasks = {t.task_id: t for t in d.gold_tasks()}
    changed = [t for t in tasks if expected["tasks"][t]["changes_db"]][:3]
    for task_id in changed:
        assert d.replay(tasks[task_id].gold_actions).db_hash() == expected["tasks"][task_id]["gold_db_hash"]
    assert d.new_world().db_hash() == expected["initial"]
    world = d.new_world()
    order = next(k for k, o in world.db.orders.items() if o.status == "pending")
    before = world.record("orders", order)
    out = world.tools.call("cancel_pending_order", {"order_id": order, "reason": "no longer needed"})
    assert not out.error and world.record("orders", order)["status"] == "cancelled"
    assert world.entity_states([("orders", order)]) == {f"orders/{order}": world.record("orders", order)}
    assert d.new_world().record("orders", order) == before
