"""Review 43's bootstrap findings: export overwrite and atomic replace, one budget and thread count for a chain,
a damaged cached model, chain keys a stage cannot change, plain file modes, label-balanced decision accuracy, and a
batch with no assistant token."""

import json
import os
import shutil
import stat
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.cli_runner import run_cli
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.compare import model_fingerprint
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.bootstrap.probe import decision_summary
from trace_train.commands.bootstrap import export
from trace_train.paths import REPO_ROOT

# one-intent episodes, a 300-token vocabulary, one episode a step: a two-stage chain trains in a few seconds
TINY = dict(env_kwargs={"n_intents": 1}, vocab_size=300, tokenizer_episodes=10, steps=2, batch_size=1,
            probe_episodes=2, checkpoint_every=1, warmup_steps=0, lr=3e-3, max_len=1024)
SHIPPED = REPO_ROOT / "checkpoints" / "retail-sim-tiny"


def _chain(parent: dict | None = None, **child) -> BootstrapConfig:
    return BootstrapConfig.from_dict({**TINY, **child, "init_from": {**TINY, **(parent or {})}})


@pytest.fixture(autouse=True)
def _one_thread():
    yield
    torch.set_num_threads(1)  # whatever a stage set


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-stage bootstrap, trained under umask 022."""
    mask = os.umask(0o022)
    try:
        runner = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path_factory.mktemp("finished"))
        runner.run(progress=False)
    finally:
        os.umask(mask)
    return runner


def _copy(finished, tmp_path) -> bc.Bootstrapper:
    shutil.copytree(finished.dir, tmp_path / finished.dir.name)
    return bc.Bootstrapper(finished.cfg, tmp_path)


# 1. export_to=... if_exists=overwrite replaces only an exported model, by publish_dir

def _small(stage: str = "bootstrap") -> list[str]:
    """Overrides that shrink a stage of the default config to seconds (so that a refusal that fails trains little)."""
    return [f"{stage}.{key}={value}" for key, value in dict(steps=1, batch_size=1, tokenizer_episodes=10,
                                                            probe_episodes=1, focus="null", threads=1).items()]


def _cli(tmp_path, capsys, *overrides, stages=1):
    """``trace-rl bootstrap`` of the default config's last ``stages`` stages, each shrunk by :func:`_small`."""
    chain = ["bootstrap.init_from=null"] if stages == 1 else [*_small("bootstrap.init_from"),
                                                              "bootstrap.init_from.init_from=null"]
    return run_cli("bootstrap", *_small(), *chain, "compare_to=null", *overrides, hydra_dir=tmp_path / "run",
                   capsys=capsys)


def test_overwrite_refuses_a_directory_that_is_not_an_exported_model(tmp_path, capsys):
    folder = tmp_path / "mycheckpoints"
    (folder / "other-model").mkdir(parents=True)
    (folder / "NOTES.txt").write_text("mine")
    (folder / "other-model" / "config.json").write_text("{}")
    code, _, err = _cli(tmp_path, capsys, f"cache_dir={tmp_path / 'cache'}", f"export_to={folder}",
                        "if_exists=overwrite")
    assert code == 2 and "not an exported model directory" in err and "Traceback" not in err, err
    assert (folder / "NOTES.txt").read_text() == "mine" and (folder / "other-model" / "config.json").is_file()
    assert not (tmp_path / "cache").exists()  # refused before any training


def test_overwrite_refuses_an_export_that_holds_the_cache(tmp_path, capsys):
    export_to = tmp_path / "model"
    export_to.mkdir()
    for name in ("bootstrap.json", "config.json"):
        (export_to / name).write_text("{}")
    code, _, err = _cli(tmp_path, capsys, f"cache_dir={export_to / 'cache'}", f"export_to={export_to}",
                        "if_exists=overwrite")
    assert code == 2 and "holds the bootstrap cache" in err, err
    assert sorted(p.name for p in export_to.iterdir()) == ["bootstrap.json", "config.json"]


def _fake_model(directory, text):
    directory.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (directory / name).write_text(f"{text} {name}")
    return directory


def test_a_failed_replace_leaves_the_old_export_whole(tmp_path, monkeypatch):
    target = _fake_model(tmp_path / "export", "old")
    (target / "bootstrap.json").write_text('{"old": true}')
    before = {p.name: p.read_text() for p in target.iterdir()}
    real_replace, failed = os.replace, []

    def failing_replace(src, dst):  # the first rename onto the export fails (a full disk; a kill stops there too)
        if os.fspath(dst) == os.fspath(target) and not failed:
            failed.append(src)
            raise OSError("no space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="no space"):
        export(_fake_model(tmp_path / "cache-model", "new"), {"new": True}, target)
    assert {p.name: p.read_text() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache-model", "export"]  # no temp folder left


def test_export_replaces_an_export_with_plain_file_modes(tmp_path):
    target = _fake_model(tmp_path / "export", "old")
    model_dir = _fake_model(tmp_path / "cache-model", "new")
    os.chmod(model_dir / "model.safetensors", 0o600)  # as safetensors writes it
    mask = os.umask(0o022)
    try:
        export(model_dir, {"new": True}, target)
    finally:
        os.umask(mask)
    assert (target / "model.safetensors").read_text() == "new model.safetensors"
    assert json.loads((target / "bootstrap.json").read_text()) == {"new": True}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in target.iterdir()} == {
        name: 0o644 for name in ("bootstrap.json", "config.json", "model.safetensors", "tokenizer.json")}


# 2. threads and time_budget_min reach the init_from stages; one budget covers the chain

def test_threads_and_budget_reach_the_parent_without_changing_any_hash():
    plain = _chain(parent={"threads": 2})
    set_here = _chain(parent={"threads": 2}, threads=1, time_budget_min=5.0)
    assert set_here.parent.threads == 1 and set_here.parent.time_budget_min == 5.0
    assert set_here.content_hash() == plain.content_hash()
    assert set_here.parent.content_hash() == plain.parent.content_hash() == BootstrapConfig(**TINY).content_hash()


def test_a_spent_budget_pauses_a_chain_in_its_first_stage(tmp_path):
    cfg = _chain(time_budget_min=0.0)
    parent_hash = cfg.parent.content_hash()
    runner = bc.Bootstrapper(cfg, tmp_path)
    with pytest.raises(bc.BootstrapPaused) as paused:
        runner.run(progress=False)
    assert (paused.value.config_hash, paused.value.step) == (parent_hash, 1)
    with pytest.raises(bc.BootstrapPaused) as paused:  # the parent finishes, then the child trains one step
        runner.run(progress=False)
    assert (paused.value.config_hash, paused.value.step) == (runner.config_hash, 1)
    runner.run(progress=False)
    assert runner.is_done()


def test_the_budget_spent_by_the_parent_is_not_given_again_to_the_child(tmp_path, monkeypatch):
    clock = {"offset": 0.0}  # the trainer's clock: real time plus 25 minutes for each step of the parent
    real_perf_counter, real_batch_loss = bc.time.perf_counter, bc.batch_loss

    def slow_parent(model, head, examples, cfg, pad_id, readouts=None):
        if cfg.steps == 3:
            clock["offset"] += 25 * 60
        return real_batch_loss(model, head, examples, cfg, pad_id, readouts)

    monkeypatch.setattr(bc, "batch_loss", slow_parent)
    monkeypatch.setattr(bc, "time", type("Clock", (), {"perf_counter": staticmethod(
        lambda: real_perf_counter() + clock["offset"])}))
    runner = bc.Bootstrapper(_chain(parent={"steps": 3}, time_budget_min=60.0), tmp_path)
    with pytest.raises(bc.BootstrapPaused) as paused:  # the parent's 75 minutes spent the chain's hour
        runner.run(progress=False)
    assert (paused.value.config_hash, paused.value.step) == (runner.config_hash, 1)
    assert bc.Bootstrapper(runner.cfg.parent, tmp_path).is_done()  # a pause never ends a stage early


def test_every_stage_of_a_chain_trains_with_the_last_stages_threads(tmp_path, monkeypatch):
    requested = []  # recorded, not applied: the test box keeps one thread
    monkeypatch.setattr(torch, "set_num_threads", requested.append)
    in_force = []
    real_batch_loss = bc.batch_loss

    def spy(model, head, examples, cfg, pad_id, readouts=None):
        in_force.append(requested[-1])
        return real_batch_loss(model, head, examples, cfg, pad_id, readouts)

    monkeypatch.setattr(bc, "batch_loss", spy)
    bc.Bootstrapper(_chain(parent={"threads": 2}, threads=1), tmp_path).run(progress=False)
    assert len(in_force) == 4 and set(in_force) == {1}, (requested, in_force)


# 3. a finished stage whose model is damaged is not reported as a success

@pytest.mark.parametrize("name,damage,says", [
    ("model/model.safetensors", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "damaged ("),
    ("model/model.safetensors", lambda p: p.unlink(), "no model.safetensors"),
    ("model/tokenizer.json", lambda p: p.write_text("{"), "damaged ("),
])
def test_a_damaged_cached_model_is_named_in_a_one_line_value_error(finished, tmp_path, name, damage, says):
    runner = _copy(finished, tmp_path)
    damage(runner.dir / name)
    with pytest.raises(ValueError) as info:
        runner.run(progress=False)
    message = str(info.value)
    assert f"bootstrap cache file {runner.dir / name} is damaged" in message and says in message, message
    assert "\n" not in message and f"delete {runner.dir / 'bootstrap.json'}" in message


def test_a_cached_model_that_is_not_the_recorded_one_is_refused_and_rebuilt_from_the_checkpoint(finished, tmp_path):
    runner = _copy(finished, tmp_path)
    weights_path = runner.model_dir / "model.safetensors"
    weights = load_file(weights_path)
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1.0  # a readable file with other weights
    save_file(weights, weights_path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match="fingerprint .* is not the .* its bootstrap.json records"):
        runner.run(progress=False)
    (runner.dir / "bootstrap.json").unlink()  # the way out the message names
    assert runner.run(progress=False)["model_fingerprint"] == model_fingerprint(finished.model_dir)


def test_the_shipped_checkpoint_as_a_cached_stage_passes_the_check(tmp_path):
    cfg = BootstrapConfig.from_dict(json.loads((SHIPPED / "bootstrap.json").read_text())["config"])
    runner = bc.Bootstrapper(cfg, tmp_path)
    shutil.copytree(SHIPPED, runner.model_dir, ignore=shutil.ignore_patterns("bootstrap.json"))
    shutil.copy(SHIPPED / "bootstrap.json", runner.dir / "bootstrap.json")
    summary = runner.run(progress=False)  # cached: only the fingerprint is recomputed
    assert summary["config_hash"] == runner.config_hash and summary["model_fingerprint"] == model_fingerprint(SHIPPED)


# 5, 6. a chain stage cannot change its parent's tokenizer or model shape

@pytest.mark.parametrize("key,value", [("vocab_size", 600), ("tokenizer_episodes", 30), ("preset", "small")])
def test_a_chain_stage_that_changes_the_tokenizer_or_the_model_shape_is_refused(key, value):
    cfg = _chain(**{key: value})
    with pytest.raises(ValueError, match=f"bootstrap.{key}={value} differs from its init_from stage's .* every "
                                         "stage of a chain keeps"):
        _ = cfg.parent
    with pytest.raises(ValueError, match=f"bootstrap.{key}"):
        bc.Bootstrapper(cfg, "unused")  # the hash reads the chain: refused before any training


@pytest.mark.parametrize("override", ["bootstrap.preset=small", "bootstrap.vocab_size=2048"])
def test_the_cli_refuses_a_changed_chain_key_in_one_line_before_training(tmp_path, capsys, override):
    code, _, err = _cli(tmp_path, capsys, f"cache_dir={tmp_path / 'cache'}", override, stages=2)
    assert code == 2 and override.split("=")[0] in err and "Traceback" not in err, err
    assert not (tmp_path / "cache").exists()


# 7. the bootstrapped model's files have the modes a plain write gives

def test_every_file_of_the_bootstrapped_model_is_readable_by_others(finished):
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in finished.model_dir.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes


# 8. the decision head's balanced accuracy is over the two labels, as the linear probes'

def test_a_constant_head_has_a_balanced_accuracy_of_one_half():
    total = Counter({"target": 33, "distractor": 33, "other": 132})
    hits = Counter({"target": 0, "distractor": 33, "other": 132})  # always "not the target"
    labels = {"target": True, "distractor": False, "other": False}
    summary = decision_summary(hits, total, {c: "structured" for c in total}, labels)["structured"]
    assert summary["balanced_accuracy"] == 0.5
    assert summary["case_mean_accuracy"] == pytest.approx(2 / 3)
    assert summary["accuracy"] == 165 / 198 and summary["points"] == 198


def test_the_shipped_decision_figures_are_label_balanced():
    probe = json.loads((SHIPPED / "bootstrap.json").read_text())["probe"]["decision_probe"]
    acc, points = probe["accuracy_by_case"], probe["points_by_case"]

    def label_accuracy(cases):
        return sum(acc[c] * points[c] for c in cases) / sum(points[c] for c in cases)

    structured = probe["by_decision"]["structured"]
    assert structured["balanced_accuracy"] == pytest.approx(
        (label_accuracy(["target"]) + label_accuracy(["distractor", "other"])) / 2)
    assert structured["case_mean_accuracy"] == pytest.approx((acc["target"] + acc["distractor"] + acc["other"]) / 3)
    precondition = probe["by_decision"]["precondition"]
    assert precondition["balanced_accuracy"] == pytest.approx(
        (label_accuracy(["allow"]) + label_accuracy(["ownership", "status"])) / 2)


# 9. a batch with no assistant token, or a loss that is not finite, stops the run naming bootstrap.max_len

def test_a_max_len_that_cuts_every_assistant_token_is_a_one_line_error(tmp_path):
    runner = bc.Bootstrapper(BootstrapConfig(**{**TINY, "max_len": 64}), tmp_path)
    with pytest.raises(ValueError, match="bootstrap.max_len=64 cuts every episode of a batch") as info:
        runner.run(progress=False)
    assert "\n" not in str(info.value) and not runner.is_done()


def test_a_loss_that_is_not_finite_stops_the_run_before_the_update(tmp_path, monkeypatch):
    real_batch_loss = bc.batch_loss

    def nan_loss(*args):
        terms = real_batch_loss(*args)
        terms.total = terms.total * float("nan")
        return terms

    monkeypatch.setattr(bc, "batch_loss", nan_loss)
    runner = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path)
    with pytest.raises(ValueError, match="the loss at step 1 is nan .*bootstrap.max_len=1024"):
        runner.run(progress=False)
    assert not runner.is_done() and not (runner.dir / "checkpoint.pt").exists()
