"""System notes in the BC data: a seeded share of episodes shows capability descriptions after the system
prompt in the prompted baseline's format, and the expert's actions do not change."""

from __future__ import annotations

import json

from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import MAX_NOTE_ITEMS, expert_episodes, note_pool, system_note
from trace_train.model.system_notes import capability_note
from trace_train.pipeline.stages import capability_prompt

POOL = [(f"cap_{i}", f"description {i}.") for i in range(7)]
SEEDS = list(range(100_000, 100_024))


def _items(note: str) -> list[str]:
    assert note.startswith("\nBe careful with:\n")
    return note.split("\n")[2:]


def test_the_note_is_a_pure_function_of_the_seed_with_the_configured_share():
    assert all(system_note(s, 0.0, POOL) == "" for s in range(50))
    assert all(system_note(s, 1.0, []) == "" for s in range(50))
    notes = [system_note(s, 0.3, POOL) for s in range(2000)]
    assert notes == [system_note(s, 0.3, POOL) for s in range(2000)]
    share = sum(bool(n) for n in notes) / len(notes)
    assert 0.26 < share < 0.34
    sizes = set()
    for note in filter(None, notes):
        items = _items(note)
        sizes.add(len(items))
        assert len(set(items)) == len(items)
        assert all(any(item == f"- {n.replace('_', ' ')}: {d}" for n, d in POOL) for item in items)
    assert sizes == set(range(1, MAX_NOTE_ITEMS + 1))
    first_items = {_items(n)[0] for n in notes if n}
    assert len(first_items) == len(POOL)  # every capability leads some note: the order is drawn too


def test_noted_episodes_differ_only_in_the_system_message():
    plain_cfg = BootstrapConfig()
    noted_cfg = BootstrapConfig(knobs=plain_cfg.knobs, system_note_fraction=0.5)
    plain, noted = expert_episodes(plain_cfg, SEEDS), expert_episodes(noted_cfg, SEEDS)
    pool = note_pool(plain)
    assert {"precondition_verification", "multi_step_task_completion", "structured_data_reasoning",
            "tool_calling_precision", "politeness"} <= {name for name, _ in pool}
    n_noted = 0
    for seed, p, n in zip(SEEDS, plain, noted):
        note = system_note(seed, 0.5, pool)
        assert n.messages[0]["content"] == p.messages[0]["content"] + note
        assert n.messages[1:] == p.messages[1:] and n.reward == p.reward  # the expert ignores the note
        n_noted += bool(note)
    assert 0 < n_noted < len(SEEDS)
    probe_view = expert_episodes(noted_cfg, SEEDS, hints=False)  # probes read the plain target
    assert [r.messages for r in probe_view] == [r.messages for r in plain]


def test_the_note_is_the_prompted_baselines_text(tmp_path):
    selected = tmp_path / "selected.json"
    selected.write_text(json.dumps({"selected": [{"name": n, "description": d} for n, d in POOL[:3]]}))
    assert capability_prompt(selected, [n for n, _ in POOL[:3]]) == capability_note(POOL[:3])
    assert capability_note([]) == ""


def test_notes_enter_the_config_hash_only_when_on():
    base = BootstrapConfig()
    assert BootstrapConfig(system_note_fraction=0.0).content_hash() == base.content_hash()
    assert BootstrapConfig(system_note_fraction=0.5).content_hash() != base.content_hash()


def test_a_noted_episode_encodes_the_note_outside_the_loss():
    from trace_train.bootstrap.data import encode
    from trace_train.model import ChatRenderer, load_policy
    from trace_train.paths import shipped_checkpoint

    _, tokenizer = load_policy(shipped_checkpoint())
    cfg = BootstrapConfig(system_note_fraction=0.5)
    renderer = ChatRenderer(tokenizer)
    seen = 0
    for record in expert_episodes(cfg, SEEDS[:12]):
        example = encode(renderer, record, cfg)
        noted = "Be careful with:" in record.messages[0]["content"]
        seen += noted
        assert ("Be careful with:" in tokenizer.decode(example.ids)) == noted
        trained = tokenizer.decode([t for t, m in zip(example.ids, example.loss_mask) if m])
        assert "Be careful" not in trained  # the note is context, never a target
    assert seen
