"""Teacher-forced probe of a BC model on held-out expert episodes: token, id-token, per-id-type and number accuracy.

Cheap (no generation); the real measure is the rollout evaluation, this one tracks learning. It reads
episodes of the target distribution (``cfg.env`` without the curriculum's ``env_kwargs``), so stages of
a curriculum are compared on the same episodes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from trace_envs.retail_sim import split_seeds
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.data import encode, entity_token_ids, expert_episodes, pad_batch
from trace_train.bootstrap.decisions import DecisionHead, head_outcomes
from trace_train.bootstrap.number_copy import number_token_ids
from trace_train.model import ChatRenderer


@torch.no_grad()
def teacher_forced_probe(model: torch.nn.Module, tokenizer: Any, renderer: ChatRenderer,
                         cfg: BootstrapConfig, batch_size: int = 8,
                         decision_head: DecisionHead | None = None) -> dict[str, Any]:
    """Argmax accuracy on assistant tokens, on entity-id tokens, per entity type and, with atomic numbers, on
    the numbers the assistant writes (and, given the decision head, its held-out accuracy per case and per
    decision)."""
    entity_ids = entity_token_ids(tokenizer)
    numbers = number_token_ids(tokenizer, cfg.atomic_numbers) if cfg.atomic_numbers else frozenset()
    number_hits = number_total = 0
    records = expert_episodes(cfg, split_seeds("test", cfg.probe_episodes), env_kwargs={}, hints=False)
    examples = [encode(renderer, r, cfg, with_decisions=decision_head is not None) for r in records]
    case_hits: Counter[str] = Counter()
    case_total: Counter[str] = Counter()
    decision_of: dict[str, str] = {}  # case -> its decision (case names are distinct across decisions)
    label_of: dict[str, bool] = {}  # case -> its label (a case has one: e.g. target True, distractor False)
    hits = total = 0
    type_hits: Counter[str] = Counter()
    type_total: Counter[str] = Counter()
    for start in range(0, len(examples), batch_size):
        ids, attn, mask, _ = (torch.from_numpy(a) for a in pad_batch(examples[start: start + batch_size],
                                                                      tokenizer.pad_token_id))
        hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
        predicted = model.lm_head(hidden[:, :-1]).argmax(-1)
        if decision_head is not None:
            points = [e.decisions or [] for e in examples[start: start + batch_size]]
            label_of.update((p.case, p.label) for ps in points for p in ps)
            for decision, case, ok in head_outcomes(decision_head, hidden, points):
                case_total[case] += 1
                case_hits[case] += int(ok)
                decision_of[case] = decision
        target = ids[:, 1:]
        select = mask[:, 1:].bool()
        correct = (predicted == target) & select
        hits += int(correct.sum())
        total += int(select.sum())
        for row, col in select.nonzero().tolist():
            token = int(target[row, col])
            if token in numbers:
                number_total += 1
                number_hits += int(correct[row, col])
            kind = entity_ids.get(token)
            if kind is not None:
                type_total[kind] += 1
                type_hits[kind] += int(correct[row, col])
    id_total = sum(type_total.values())
    summary = {"token_accuracy": hits / max(1, total), "id_token_accuracy": sum(type_hits.values()) / max(1, id_total),
               "id_accuracy_by_type": {k: type_hits[k] / type_total[k] for k in sorted(type_total)},
               "id_tokens_by_type": dict(sorted(type_total.items())), "episodes": len(examples)}
    if numbers:
        summary["number_token_accuracy"] = number_hits / max(1, number_total)
        summary["number_tokens"] = number_total
    if decision_head is not None:
        summary["decision_probe"] = {"accuracy": sum(case_hits.values()) / max(1, sum(case_total.values())),
                                     "accuracy_by_case": {k: case_hits[k] / case_total[k] for k in sorted(case_total)},
                                     "points_by_case": dict(sorted(case_total.items())),
                                     "by_decision": decision_summary(case_hits, case_total, decision_of, label_of)}
    return summary


def decision_summary(hits: Counter[str], total: Counter[str], decision_of: dict[str, str],
                     label_of: dict[str, bool]) -> dict[str, Any]:
    """Per decision: accuracy, point count, balanced accuracy (the mean of the two labels' accuracies, as the
    linear probes report it: chance is 0.5 whatever the label mix) and ``case_mean_accuracy`` (the mean of its
    cases' accuracies; a decision with three cases of one label, e.g. structured's distractor and other, gives a
    head that always answers that label 2/3)."""
    out: dict[str, Any] = {}
    for decision in sorted(set(decision_of.values())):
        cases = [c for c, d in decision_of.items() if d == decision]
        n = sum(total[c] for c in cases)
        labels = sorted({label_of[c] for c in cases})
        per_label = [sum(hits[c] for c in cases if label_of[c] == v) / sum(total[c] for c in cases if label_of[c] == v)
                     for v in labels]
        out[decision] = {"accuracy": sum(hits[c] for c in cases) / n, "points": n,
                         "balanced_accuracy": sum(per_label) / len(per_label),
                         "case_mean_accuracy": sum(hits[c] / total[c] for c in cases) / len(cases)}
    return out
