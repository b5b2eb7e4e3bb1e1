"""Fresh linear probes: the label-balanced fit, and the bootstrap summary that records them."""

import json

import torch

from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.decisions import DECISIONS
from trace_train.bootstrap.linear_probe import fit_probe, score

TINY = dict(steps=2, batch_size=2, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=2, warmup_steps=1,
            lr=3e-3, max_len=1024)


def _imbalanced(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """15 % positives whose mean sits one standard deviation away on the first of 8 features."""
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < 0.15).float()
    x = torch.randn(n, 8, generator=g)
    x[:, 0] += 1.0 * y
    return x, y


def test_the_balanced_probe_trades_common_label_accuracy_for_balanced_accuracy():
    (x, y), (xt, yt) = _imbalanced(4000, 0), _imbalanced(4000, 1)
    plain, balanced = score(fit_probe(x, y, balanced=False), xt, yt), score(fit_probe(x, y), xt, yt)
    # optimal balanced accuracy here is Phi(0.5) = 0.69; the unweighted fit calls almost everything negative
    assert balanced["balanced_accuracy"] > 0.65 > plain["balanced_accuracy"]
    assert plain["accuracy"] > balanced["accuracy"]
    # with equal label shares the weighting is a constant factor: the two fits agree
    x2, y2 = torch.randn(400, 4, generator=torch.Generator().manual_seed(2)), torch.tensor([0.0, 1.0] * 200)
    x2[:, 1] += y2
    a, b = fit_probe(x2, y2, balanced=False), fit_probe(x2, y2)
    assert torch.allclose(a.weight, b.weight, atol=1e-4) and torch.allclose(a.bias, b.bias, atol=1e-4)


def test_fit_probe_leaves_the_callers_rng_alone_and_depends_on_its_seed_only():
    x, y = _imbalanced(64, 3)
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    first = fit_probe(x, y, steps=5, seed=7)
    assert torch.equal(torch.rand(3), expected)  # the caller's stream goes on where it was
    torch.manual_seed(99)
    again = fit_probe(x, y, steps=5, seed=7)
    assert torch.equal(first.weight, again.weight) and torch.equal(first.bias, again.bias)


def test_a_bootstrap_records_its_linear_probes_once(tmp_path, monkeypatch):
    cfg = BootstrapConfig(**TINY, decision_loss_weight=1.0, decisions=tuple(DECISIONS))
    runner = bc.Bootstrapper(cfg, tmp_path)
    plain = runner.run(progress=False)
    assert "linear_probes" not in plain  # only asked for by the command, for the final stage
    summary = runner.run(progress=False, linear_probes=True)
    probes = summary["linear_probes"]
    assert set(probes) == set(DECISIONS)
    assert all(p["points"] > 0 and {"balanced_accuracy", "unweighted_balanced_accuracy"} <= set(p)
               for p in probes.values())
    for p in probes.values():  # every held-out point in exactly one case group, whose hits give the accuracy
        assert sum(p["points_by_case"].values()) == p["points"]
        assert set(p["accuracy_by_case"]) == set(p["points_by_case"])
        hits = sum(p["accuracy_by_case"][g] * n for g, n in p["points_by_case"].items())
        assert abs(hits / p["points"] - p["accuracy"]) < 1e-6  # accuracy is a float32 mean
    assert all("/" in g for g in probes["precondition"]["points_by_case"])  # refined by kind and order status
    assert json.loads((runner.dir / "bootstrap.json").read_text()) == json.loads(json.dumps(summary))

    def no_second_fit(*args, **kwargs):
        raise AssertionError("linear probes recomputed")

    monkeypatch.setattr(bc, "fresh_linear_probes", no_second_fit)
    assert runner.run(progress=False, linear_probes=True) == summary
