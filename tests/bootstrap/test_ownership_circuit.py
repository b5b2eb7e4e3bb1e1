"""``bootstrap.ownership_circuit``: a layer-0 head matches user ids, a layer-1 head looks up the order's owner, and two
readouts say whether that owner was seen before; plus the list of focuses the stage that trains it needs."""

import pytest
import torch

from trace_envs.config_builder import ConfigError
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.attention_heads import head_query_key_value, layer_inputs
from trace_train.bootstrap.config import BootstrapConfig, FocusConfig, OwnershipCircuitConfig
from trace_train.bootstrap.data import (
    FOCUS_SEED_OFFSET,
    FOCUS_SEED_RANGE,
    batch_seeds,
    batches,
    encode,
    entity_token_ids,
    expert_episodes,
    focus_config,
    focus_seeds,
)
from trace_train.bootstrap.decisions import DecisionPoint
from trace_train.bootstrap.ownership_circuit import (
    LOOKUP_LAYER,
    MATCH_LAYER,
    OwnershipReadouts,
    ownership_circuit_loss,
    ownership_targets,
    user_id_tokens,
)
from trace_train.model import ChatRenderer, load_policy

TINY = dict(steps=3, batch_size=2, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=1, warmup_steps=1,
            lr=3e-3, max_len=1024, threads=1, decision_loss_weight=1.0)
CANCELS = {"n_intents": 1, "kinds": ["cancel"]}
RETURNS = {"n_intents": 1, "kinds": ["return"]}
CIRCUIT = {**TINY, "ownership_circuit": {}, "focus": [{"env_kwargs": CANCELS, "batch_size": 2, "weight": 0.5},
                                                     {"env_kwargs": RETURNS, "batch_size": 2, "weight": 0.5}]}


@pytest.fixture(scope="module")
def base():
    """The shipped base and its tokenizer (every user id is one token of it)."""
    torch.set_num_threads(1)
    model, tokenizer = load_policy("checkpoints/retail-sim-tiny")
    return model, tokenizer


def _encoded(tokenizer, env_kwargs, seeds, cfg=None):
    cfg = cfg or BootstrapConfig.from_dict({**CIRCUIT, "env_kwargs": env_kwargs})
    users = user_id_tokens(entity_token_ids(tokenizer))
    renderer = ChatRenderer(tokenizer)
    return [encode(renderer, r, cfg, with_decisions=True, user_tokens=users)
            for r in expert_episodes(cfg, seeds, hints=False)]


def test_targets_point_each_user_id_at_its_earlier_copies_and_each_precondition_point_at_the_owner():
    U, V, X = 50, 51, 9  # two user-id tokens and a filler
    ids = [X, U, X, U, X, V, X, X, U, X]
    mask = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # position 3: the assistant writes U (an earlier copy, not a query)
    points = [DecisionPoint(6, True, "ownership"), DecisionPoint(7, False, "x", "multi_step"),
              DecisionPoint(9, False, "allow")]
    t = ownership_targets(ids, mask, points, {U, V})
    assert t.match_queries == [1, 5, 8] and t.match_sources == [[0], [0], [1, 3]]
    # the owner is the last user id outside assistant turns at or before the point; multi-step points are not read
    assert t.lookup_queries == [6, 9] and t.lookup_sources == [[5], [8]]
    assert t.seen_labels == [False, True] and t.owned_labels == [False, True]
    assert ownership_targets([X, X], [0, 0], [DecisionPoint(1, False, "allow")], {U}).lookup_queries == []


def _repeated_foreign_lookup():
    """The profile shows the user (U); lookups 1 and 2 both show another customer (V), each followed by a decision."""
    U, V, X = 50, 51, 9
    ids = [X, U, X, X, V, X, X, X, V, X, X]
    mask = [0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1]
    return ownership_targets(ids, mask, [DecisionPoint(5, True, "ownership"), DecisionPoint(9, True, "ownership")],
                             {U, V})


def test_another_customers_id_seen_in_an_earlier_lookup_is_still_not_the_users():
    """Two lookups of the same other customer's order: its owner's id occurred before the second decision (the
    first lookup's result), so "seen before" is true there, but the order is still not the user's."""
    t = _repeated_foreign_lookup()
    assert t.lookup_sources == [[4], [8]]
    assert t.seen_labels == [False, True] and t.owned_labels == [False, False]


def test_the_ownership_readout_learns_whose_order_it_is_and_the_seen_readout_what_occurred_before(base):
    """Readouts with zero weights and bias 2 score every point alike, so each term's loss says which labels it
    reads: "seen" the token's [False, True], "ownership" the order's [False, False]."""
    model, _ = base
    t = _repeated_foreign_lookup()
    readouts = OwnershipReadouts(model.config.hidden_size)
    with torch.no_grad():
        for linear in (readouts.seen, readouts.ownership):
            linear.weight.zero_()
            linear.bias.fill_(2.0)
    states = torch.randn(11, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    out = ownership_circuit_loss(model, readouts, OwnershipCircuitConfig(), [states], [states], [states], [t])
    softplus = float(torch.nn.functional.softplus(torch.tensor(2.0)))
    assert out.parts["seen"] == pytest.approx((softplus + softplus - 2.0) / 2, rel=1e-5)
    assert out.parts["ownership"] == pytest.approx(softplus, rel=1e-5)


def test_the_seen_label_is_ownership_on_real_cancels_and_returns(base):
    _, tokenizer = base
    labels = []
    for kwargs in (CANCELS, RETURNS):
        for example in _encoded(tokenizer, kwargs, list(range(1_000_000, 1_000_060))):
            cases = [p.case for p in example.decisions if p.decision == "precondition"]
            assert len(cases) == len(example.ownership.seen_labels) >= 1
            labels += [(seen, case != "ownership") for seen, case in zip(example.ownership.seen_labels, cases)]
            assert example.ownership.owned_labels == [case != "ownership" for case in cases]
            assert example.ownership.match_queries  # the user's own id, at least in the profile lookup
    assert all(seen == owned for seen, owned in labels)  # one request per episode: no earlier lookup to see
    assert {owned for _, owned in labels} == {True, False}  # both kinds occur: the test can tell them apart


def test_training_the_circuit_alone_moves_both_heads_and_both_readouts(base):
    model, tokenizer = base
    torch.manual_seed(0)
    model = type(model)(model.config)  # a fresh tiny model of the same shape: nothing learnt yet
    examples = _encoded(tokenizer, CANCELS, list(range(1_000_000, 1_000_006)))
    cfg = OwnershipCircuitConfig()
    readouts = OwnershipReadouts(model.config.hidden_size, torch.Generator().manual_seed(0))
    params = [*model.parameters(), *readouts.parameters()]
    optimizer = torch.optim.AdamW(params, lr=3e-3)

    def loss():
        with layer_inputs(model.model, [MATCH_LAYER, LOOKUP_LAYER]) as captured:
            finals = [model.model(input_ids=torch.as_tensor([e.ids])).last_hidden_state[0] for e in examples]
        return ownership_circuit_loss(model, readouts, cfg, [c[0] for c in captured[MATCH_LAYER]],
                                      [c[0] for c in captured[LOOKUP_LAYER]], finals, [e.ownership for e in examples])

    first = loss()
    for _ in range(40):
        optimizer.zero_grad()
        loss().total.backward()
        optimizer.step()
    last = loss()
    assert set(first.parts) == {"match", "lookup", "seen", "ownership"}
    for name in ("match", "lookup"):  # -log attention mass on the wanted positions
        assert last.parts[name] < 0.5 * first.parts[name], (name, first.parts, last.parts)
    assert last.parts["seen"] < first.parts["seen"] and last.parts["ownership"] < first.parts["ownership"]
    # the lookup head now attends from each decision point to the owner's token
    e = examples[0]
    with torch.no_grad(), layer_inputs(model.model, [LOOKUP_LAYER]) as captured:
        model.model(input_ids=torch.as_tensor([e.ids]))
        q, k, _ = head_query_key_value(model.model, captured[LOOKUP_LAYER][0][0], cfg.lookup_head, LOOKUP_LAYER)
    at = e.ownership.lookup_queries[0]
    attention = ((q[at] @ k[: at + 1].T) * model.model.layers[LOOKUP_LAYER].self_attn.scaling).softmax(-1)
    assert attention[e.ownership.lookup_sources[0][0]] > 0.5


def test_the_circuit_loss_is_the_same_packed_and_padded(base):
    model, tokenizer = base
    readouts = OwnershipReadouts(model.config.hidden_size, torch.Generator().manual_seed(0))
    examples = _encoded(tokenizer, CANCELS, list(range(1_000_000, 1_000_003)))
    totals = {}
    for packing in ("none", "packed"):
        cfg = BootstrapConfig.from_dict({**CIRCUIT, "packing": packing})
        with torch.no_grad():
            plain = bc.batch_loss(model, None, examples, BootstrapConfig.from_dict({**TINY, "packing": packing}),
                                  tokenizer.pad_token_id)
            terms = bc.batch_loss(model, None, examples, cfg, tokenizer.pad_token_id, readouts)
        assert set(terms.circuit) == {"match", "lookup", "seen", "ownership"}
        totals[packing] = terms.total - plain.total
    assert totals["none"] > 0.1
    torch.testing.assert_close(totals["packed"], totals["none"], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="needs its readouts"):
        bc.batch_loss(model, None, examples, BootstrapConfig.from_dict(CIRCUIT), tokenizer.pad_token_id)


def test_config_validation_and_the_hash_of_a_stage_without_the_circuit():
    plain = BootstrapConfig(**TINY)
    assert BootstrapConfig(**TINY, ownership_circuit=None).content_hash() == plain.content_hash()
    circuit = BootstrapConfig.from_dict({**TINY, "ownership_circuit": {}})
    assert isinstance(circuit.ownership_circuit, OwnershipCircuitConfig)
    assert circuit.content_hash() != plain.content_hash()
    heavier = BootstrapConfig.from_dict({**TINY, "ownership_circuit": {"seen_weight": 1.0}})
    assert heavier.content_hash() != circuit.content_hash()
    with pytest.raises(ConfigError, match="needs bootstrap.decision_loss_weight > 0 with the precondition"):
        BootstrapConfig.from_dict({**TINY, "decisions": ["multi_step"], "ownership_circuit": {}})
    with pytest.raises(ConfigError, match="needs bootstrap.decision_loss_weight"):
        BootstrapConfig.from_dict({**TINY, "decision_loss_weight": 0.0, "ownership_circuit": {}})
    with pytest.raises(ConfigError, match="lookup_head must be >= 0"):
        BootstrapConfig.from_dict({**TINY, "ownership_circuit": {"lookup_head": -1}})
    with pytest.raises(ConfigError, match="seen_weight must be >= 0"):
        BootstrapConfig.from_dict({**TINY, "ownership_circuit": {"seen_weight": -1.0}})
    with pytest.raises(ConfigError, match="ownership_circuit.pointer_wieght: unknown key"):
        BootstrapConfig.from_dict({**TINY, "ownership_circuit": {"pointer_wieght": 1.0}})


def test_a_head_the_layer_does_not_have_is_refused(base):
    model, _ = base
    with pytest.raises(ValueError, match="head 4 does not exist: layer 1 has 4 query heads"):
        head_query_key_value(model.model, torch.zeros(3, model.config.hidden_size), 4, 1)


def test_a_list_of_focuses_gives_one_batch_per_focus_from_its_own_seeds(base):
    _, tokenizer = base
    one = BootstrapConfig.from_dict({**TINY, "focus": {"env_kwargs": RETURNS}})
    listed = BootstrapConfig.from_dict({**TINY, "focus": [{"env_kwargs": RETURNS}]})
    assert one.focuses == listed.focuses and one.content_hash() != BootstrapConfig(**TINY).content_hash()
    # the first focus keeps the seeds a single focus always had
    assert focus_seeds(one, 5) == list(range(FOCUS_SEED_OFFSET + 5 * 8, FOCUS_SEED_OFFSET + 6 * 8))
    cfg = BootstrapConfig.from_dict(CIRCUIT)
    assert [focus_config(cfg, i).env_kwargs for i in range(2)] == [CANCELS, RETURNS]
    seeds = [{s for step in range(50) for s in focus_seeds(cfg, step, i)} for i in range(2)]
    bc_stream = {s for step in range(50) for s in batch_seeds(cfg, step)}
    assert len(seeds[0]) == len(seeds[1]) == 100 and not seeds[0] & seeds[1] and not (seeds[0] | seeds[1]) & bc_stream
    step, examples, focused = next(batches(cfg, ChatRenderer(tokenizer), 2))
    assert step == 2 and len(examples) == 2 and [len(b) for b in focused] == [2, 2]
    for batch, kind in zip(focused, ("cancel", "return")):
        assert all(e.ownership is not None and e.ownership.lookup_queries for e in batch)
        assert [e.seed for e in batch] == focus_seeds(cfg, 2, ("cancel", "return").index(kind))
    spent = BootstrapConfig.from_dict({**TINY, "focus": {"env_kwargs": RETURNS},
                                       "data_offset_steps": FOCUS_SEED_RANGE // 8})
    with pytest.raises(ValueError, match="focus 0 has used up its 100,000 seeds"):
        focus_seeds(spent, 0)
    with pytest.raises(ConfigError, match="lists 5 focuses; give 1 to 4"):
        BootstrapConfig.from_dict({**TINY, "focus": [{"env_kwargs": RETURNS}] * 5})
    with pytest.raises(ConfigError, match=r"focus"):
        BootstrapConfig.from_dict({**TINY, "focus": [{"env_kwarg": RETURNS}]})
    assert isinstance(cfg.focuses[0], FocusConfig)


def test_a_paused_circuit_stage_resumes_to_the_same_model_and_readouts(tmp_path):
    cfg = BootstrapConfig.from_dict(CIRCUIT)
    straight = bc.Bootstrapper(cfg, tmp_path / "straight")
    straight.run(progress=False)
    paused = bc.Bootstrapper(BootstrapConfig.from_dict({**CIRCUIT, "time_budget_min": 0.0}), tmp_path / "paused")
    with pytest.raises(bc.BootstrapPaused):
        paused.run(progress=False)
    state = torch.load(paused.dir / "checkpoint.pt", weights_only=False)
    assert state["step"] == 1 and set(state["ownership_readouts"]) == {"seen.weight", "seen.bias", "ownership.weight",
                                                                       "ownership.bias"}
    resumed = bc.Bootstrapper(cfg, tmp_path / "paused").run(progress=False)
    assert resumed["model_fingerprint"] == straight.run(progress=False)["model_fingerprint"]
    final = torch.load(paused.dir / "checkpoint.pt", weights_only=False)["ownership_readouts"]
    expected = torch.load(straight.dir / "checkpoint.pt", weights_only=False)["ownership_readouts"]
    for key in expected:
        torch.testing.assert_close(final[key], expected[key], rtol=0, atol=0)
    rows = [line for line in (straight.dir / "metrics.jsonl").read_text().splitlines() if line]
    assert all('"circuit_lookup"' in row for row in rows)
    # a checkpoint without the readouts is reported as damaged, not silently re-initialised
    del state["ownership_readouts"]
    torch.save(state, paused.dir / "checkpoint.pt")
    (paused.dir / "bootstrap.json").unlink()
    with pytest.raises(ValueError, match=r"checkpoint.pt is damaged \(missing \['ownership_readouts'\]\)"):
        bc.Bootstrapper(cfg, tmp_path / "paused").run(progress=False)


def test_the_ownership_circuit_config_is_a_sixth_stage_on_the_shipped_chain():
    import yaml

    from trace_train.paths import CONF_DIR

    def stage(name):
        return BootstrapConfig.from_dict(yaml.safe_load((CONF_DIR / "bootstrap" / f"{name}.yaml").read_text()))

    shipped, circuit = stage("default"), stage("ownership_circuit")
    assert circuit.parent.content_hash() == shipped.content_hash()  # trains on top of the shipped base, nothing else
    # stage 6 keeps stage 5's data and adds the circuit, with single cancels and returns as two more focuses
    for key in ("knobs", "decisions", "hint_fraction", "hint_uptake", "system_note_fraction", "number_copy_weight"):
        assert getattr(circuit, key) == getattr(shipped, key), key
    assert circuit.ownership_circuit == OwnershipCircuitConfig() and shipped.ownership_circuit is None
    assert circuit.data_offset_steps >= shipped.data_offset_steps + shipped.steps  # fresh episodes
    assert circuit.focuses[0] == shipped.focuses[0]
    assert [f.env_kwargs for f in circuit.focuses[1:]] == [CANCELS, RETURNS]
