"""The rollout freezes the process's long-lived objects once and still collects later garbage."""

from __future__ import annotations

import gc
import weakref

from trace_train.rollout import gc_policy


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_freeze_exempts_live_objects_and_collects_later_cycles(monkeypatch):
    monkeypatch.setattr(gc_policy, "_frozen", False)
    before = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]  # alive at the freeze: moved to the permanent generation
    gc_policy.freeze_long_lived()
    frozen = gc.get_freeze_count()
    assert frozen >= before + len(kept)
    gc_policy.freeze_long_lived()  # once per process
    assert gc.get_freeze_count() == frozen
    dead = _cycle()  # garbage made after the freeze is still found by the collector
    assert dead() is not None
    gc.collect()
    assert dead() is None


def test_hf_rollout_freezes_before_its_first_generation(model, tokenizer, monkeypatch):
    from tests.rollout.fake_tool_env import fake_factory
    from trace_train.rollout import EpisodeRequest, SamplingParams
    from trace_train.rollout import hf as hf_module

    events = []
    real_generate = hf_module.generate_turn
    monkeypatch.setattr(hf_module, "freeze_long_lived", lambda: events.append("freeze"))
    monkeypatch.setattr(hf_module, "generate_turn",
                        lambda *a, **k: events.append("generate") or real_generate(*a, **k))
    backend = hf_module.HFRolloutBackend(model, tokenizer, env_factory=fake_factory)
    requests = [EpisodeRequest("fake/tool-v0", seed=0, sample_seed=s, env_kwargs={"turns": 2}) for s in range(2)]
    backend.rollout(requests, SamplingParams(temperature=1.0, max_new_tokens=4))
    assert events[0] == "freeze" and events.count("freeze") == 1 and "generate" in events
    events.clear()
    opted_out = hf_module.HFRolloutBackend(model, tokenizer, env_factory=fake_factory, freeze_gc=False)
    opted_out.rollout(requests, SamplingParams(temperature=1.0, max_new_tokens=4))
    assert "freeze" not in events and "generate" in events
