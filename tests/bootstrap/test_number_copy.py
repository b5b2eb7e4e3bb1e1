"""``bootstrap.number_copy_weight``: one last-layer head learns to point at the number the assistant restates."""

import copy
import dataclasses

import pytest
import torch
from hydra import compose, initialize_config_dir

from trace_envs.config_builder import ConfigError
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import (
    copy_head_token_ids,
    encode,
    entity_token_ids,
    expert_episodes,
    reason_evidence,
    train_tokenizer,
)
from trace_train.bootstrap.number_copy import (
    COPY_HEAD,
    Evidence,
    last_layer_input,
    number_copies,
    number_copy_loss,
    number_token_ids,
)
from trace_train.model import ChatRenderer, load_policy
from trace_train.paths import CONF_DIR

TINY = dict(steps=2, batch_size=3, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=2, warmup_steps=1,
            lr=3e-3, max_len=1024, threads=1, copy_loss_weight=1.0, atomic_numbers=1000, number_copy_weight=1.0)
QUESTION_SEEDS = list(range(1_000_000, 1_000_060))


@pytest.fixture(scope="module")
def numbered(tmp_path_factory):
    """A tiny model trained two steps with atomic numbers and the number-copy loss, its tokenizer and config."""
    cfg = BootstrapConfig(**TINY)
    runner = bc.Bootstrapper(cfg, tmp_path_factory.mktemp("numbers"))
    summary = runner.run(progress=False)
    model, tokenizer = load_policy(runner.model_dir)
    return model, tokenizer, cfg, summary


def _question_examples(tokenizer, cfg, n=3):
    """Encoded expert episodes that restate numbers (value questions: prices into calculate, then the total)."""
    numbers = number_token_ids(tokenizer, cfg.atomic_numbers)
    renderer = ChatRenderer(tokenizer)
    examples = [encode(renderer, r, cfg, numbers=numbers) for r in expert_episodes(cfg, QUESTION_SEEDS, hints=False)]
    return [e for e in examples if e.numbers.queries][:n]


def test_number_copies_point_each_restated_number_at_its_earlier_occurrences_outside_assistant_turns():
    numbers = frozenset({50, 51, 52})
    ids = [1, 50, 2, 51, 50, 3, 50, 51, 52, 9]
    assistant = [0, 0, 0, 0, 0, 0, 1, 1, 1, 0]
    copies = number_copies(ids, assistant, numbers)
    # 50 (at 6) was stated at 1 and 4, 51 (at 7) at 3; 52 (at 8) never appeared before, so it is no copy
    assert copies.queries == [5, 6] and copies.sources == [[1, 4], [3]]
    assert copies.context == [1, 3, 4] and copies.context_tokens == [50, 51, 50]


def test_an_evidence_phrase_makes_its_cues_sources_and_the_stated_token_what_the_head_writes():
    # token 70 is stated by the phrase (5, 6, 7) whose cues are 6 and 7 (5 is shared with another phrase)
    evidence = [Evidence(70, (5, 6, 7), frozenset({6, 7})), Evidence(71, (5, 8, 9), frozenset({8, 9}))]
    ids = [1, 5, 6, 7, 2, 50, 3, 70, 71, 50, 6]
    assistant = [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0]
    copies = number_copies(ids, assistant, frozenset({50}), evidence)
    # 70 at 7 points at the cues 2 and 3; 71 at 8 was never stated (no source); 50 at 9 points at 5
    assert copies.queries == [6, 8] and copies.sources == [[2, 3], [5]]
    # the lone 6 at 10 is no phrase, so it is no cue; each cue writes the token its phrase states
    assert copies.context == [2, 3, 5] and copies.context_tokens == [70, 70, 50]
    assert number_copies(ids, assistant, frozenset({50})).queries == [8]  # without evidence: the number alone


def test_the_cancel_reasons_are_stated_by_the_users_phrases(numbered):
    _, tokenizer, _, _ = numbered
    evidence = {tokenizer.convert_ids_to_tokens(e.token): e for e in reason_evidence(tokenizer)}
    assert set(evidence) == {"no longer needed", "ordered by mistake"}
    mistake = evidence["ordered by mistake"]
    assert tokenizer.decode(list(mistake.phrase)).strip() == "I ordered it by mistake"
    assert {tokenizer.decode([t]).strip() for t in mistake.cues} == {"ordered", "by", "mistake"}
    cfg = BootstrapConfig(**{**TINY, "number_copy_reasons": True})
    renderer, numbers = ChatRenderer(tokenizer), number_token_ids(tokenizer, cfg.atomic_numbers)
    pointed = written = 0
    for record in expert_episodes(cfg, list(range(60)), hints=False):
        stated = [i["reason"] for i in record.info["task"]["intents"] if i["kind"] == "cancel"]
        example = encode(renderer, record, cfg, numbers=numbers, evidence=tuple(evidence.values()))
        for query, sources in zip(example.numbers.queries, example.numbers.sources):
            reason = tokenizer.convert_ids_to_tokens(example.ids[query + 1])
            if reason in evidence:
                assert reason in stated and all(example.ids[s] in evidence[reason].cues for s in sources)
                pointed += 1
        written += sum(example.loss_mask[t] and example.ids[t] in {e.token for e in evidence.values()}
                       for t in range(len(example.ids)))
    assert 0 < pointed < written  # the expert's sloppy default reason has no phrase to point at


def test_number_tokens_need_a_tokenizer_with_atomic_numbers(numbered):
    _, tokenizer, _, _ = numbered
    ids = number_token_ids(tokenizer, 1000)
    assert len(ids) == 1000 and tokenizer.convert_ids_to_tokens(sorted(ids)[:1]) == ["0"]
    digits = train_tokenizer(BootstrapConfig(**{**TINY, "atomic_numbers": 0, "number_copy_weight": 0.0}))
    with pytest.raises(ValueError, match="bootstrap.atomic_numbers"):
        number_token_ids(digits, 1000)


def test_the_pointer_term_reads_the_attention_the_model_really_computes(numbered):
    model, tokenizer, cfg, _ = numbered
    example = _question_examples(tokenizer, cfg, n=1)[0]
    ids = torch.tensor([example.ids])
    model.config._attn_implementation = "eager"  # attention probabilities come back only from the eager kernel
    try:
        with torch.no_grad(), last_layer_input(model.model) as captured:
            attention = model.model(input_ids=ids, output_attentions=True).attentions[-1][0, COPY_HEAD]
            states = captured[0][0]
    finally:
        model.config._attn_implementation = "sdpa"
    copies = example.numbers
    expected_pointer = torch.stack([-attention[q, src].sum().log() for q, src in zip(copies.queries, copies.sources)])
    only_value = type(copies)(context=copies.context, context_tokens=copies.context_tokens)
    with torch.no_grad():
        both = number_copy_loss(model, [states], [copies])
        value = number_copy_loss(model, [states], [only_value])
    torch.testing.assert_close(both - value, expected_pointer.mean(), rtol=1e-4, atol=1e-4)
    assert value > 0  # the value term: the LM head on what the head writes from each context number


def test_the_number_loss_is_the_same_packed_and_padded_and_absent_without_numbers(numbered):
    model, tokenizer, cfg, _ = numbered
    examples = _question_examples(tokenizer, cfg)
    losses = {}
    for packing in ("none", "packed"):
        with_numbers = BootstrapConfig(**{**TINY, "packing": packing})
        without = BootstrapConfig(**{**TINY, "packing": packing, "number_copy_weight": 0.0})
        with torch.no_grad():
            losses[packing] = (bc.batch_loss(model, None, examples, with_numbers, tokenizer.pad_token_id).total
                               - bc.batch_loss(model, None, examples, without, tokenizer.pad_token_id).total)
    assert losses["none"] > 0.1
    torch.testing.assert_close(losses["packed"], losses["none"], rtol=1e-4, atol=1e-4)
    plain = [type(e)(e.ids, [0] * len(e.ids), e.seed) for e in examples]  # nothing restated, nothing in context
    assert number_copy_loss(model, [torch.zeros(len(e.ids), 128) for e in plain],
                            [number_copies(e.ids, e.loss_mask, frozenset()) for e in plain]) is None


def test_training_on_the_number_loss_moves_attention_onto_the_number_to_copy(numbered):
    torch.manual_seed(0)
    model, tokenizer, cfg, _ = numbered
    model = copy.deepcopy(model)  # the fixture's model stays as trained
    examples = _question_examples(tokenizer, cfg)
    states_of = lambda: bc._episode_rows(_capture(model, examples), [len(e.ids) for e in examples], packed=True)  # noqa: E731
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with torch.no_grad():
        before = number_copy_loss(model, states_of(), [e.numbers for e in examples])
    for _ in range(20):
        loss = number_copy_loss(model, states_of(), [e.numbers for e in examples])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = number_copy_loss(model, states_of(), [e.numbers for e in examples])
    assert after < 0.5 * before, (before, after)


def _capture(model, examples):
    from trace_train.grpo.packing import packed_hidden_states

    with last_layer_input(model.model) as captured:
        packed_hidden_states(model.model, [e.ids for e in examples])
    return captured[0]


def test_the_probe_reports_how_often_the_assistant_numbers_are_right(numbered):
    _, _, _, summary = numbered
    assert 0 <= summary["probe"]["number_token_accuracy"] <= 1 and summary["probe"]["number_tokens"] > 0


def test_number_copying_is_validated_and_absent_from_hashes_without_it():
    with pytest.raises(ConfigError, match="needs bootstrap.atomic_numbers"):
        BootstrapConfig.from_dict({"number_copy_weight": 1.0})
    with pytest.raises(ConfigError, match="number_copy_weight must be >= 0"):
        BootstrapConfig.from_dict({"atomic_numbers": 10, "number_copy_weight": -1.0})
    base = {**TINY, "number_copy_weight": 0.0}
    assert BootstrapConfig(**base).content_hash() != BootstrapConfig(**TINY).content_hash()
    without = {k: v for k, v in base.items() if k != "number_copy_weight"}
    assert BootstrapConfig(**base).content_hash() == BootstrapConfig(**without).content_hash()


def test_with_entities_the_loss_also_points_at_the_ids_the_assistant_restates(numbered):
    _, tokenizer, _, _ = numbered
    cfg = BootstrapConfig(**{**TINY, "number_copy_entities": True})
    covered = copy_head_token_ids(tokenizer, cfg)
    numbers = number_token_ids(tokenizer, cfg.atomic_numbers)
    entities = entity_token_ids(tokenizer)
    assert covered == numbers | frozenset(entities) and len(entities) > 100
    assert copy_head_token_ids(tokenizer, BootstrapConfig(**TINY)) == numbers
    renderer = ChatRenderer(tokenizer)
    records = expert_episodes(cfg, list(range(30)), hints=False)
    orders = restated = 0
    for record in records:
        example = encode(renderer, record, cfg, numbers=covered)
        for query, sources in zip(example.numbers.queries, example.numbers.sources):
            token = example.ids[query + 1]  # the assistant's token; it was stated at every source, outside its turns
            assert example.loss_mask[query + 1] and all(example.ids[s] == token and not example.loss_mask[s]
                                                         for s in sources)
            restated += 1
            orders += entities.get(token) == "order_id"
    assert orders > 10 and restated > orders  # the order the user named, among the other copied ids


@pytest.mark.parametrize("key", ["number_copy_entities", "number_copy_reasons"])
def test_entity_and_reason_copying_need_the_number_loss_and_change_the_hash_only_when_on(key):
    with pytest.raises(ConfigError, match=f"{key} needs bootstrap.number_copy_weight"):
        BootstrapConfig.from_dict({"atomic_numbers": 10, key: True})
    plain = BootstrapConfig(**TINY).content_hash()
    assert BootstrapConfig(**{**TINY, key: True}).content_hash() != plain
    assert BootstrapConfig(**{**TINY, key: False}).content_hash() == plain


def test_the_shipped_chain_packs_atomic_numbers_and_copies_from_stage_three_on():
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        stage = BootstrapConfig.from_dict(compose("bootstrap").bootstrap)
    stages = []
    while stage is not None:
        stages.append(stage)
        stage = stage.parent
    assert len(stages) == 5
    for depth, stage in enumerate(stages):  # stage 5 first
        assert (stage.packing, stage.atomic_numbers) == ("packed", 1000)
        copies = depth < 3  # stages 5, 4, 3 copy numbers, ids and reasons
        assert (stage.number_copy_weight, stage.number_copy_entities, stage.number_copy_reasons) == (
            (1.0, True, True) if copies else (0.0, False, False))
    # stages 5 and 4: multi-step and structured 0.55, precondition and precision 0.7 (all above 0.5)
    for stage in stages[:2]:
        assert dataclasses.asdict(stage.knobs) == dict(precondition=0.7, structured=0.55, multi_step=0.55,
                                                       precision=0.7)
