"""A time budget pauses a bootstrap (never finishes it early), and a finished model is compared with a reference."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.cli_runner import run_cli
from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.compare import compare_models, model_fingerprint
from trace_train.bootstrap.config import BootstrapConfig
from trace_train.commands._validate import PAUSED_EXIT_CODE
from trace_train.commands.bootstrap import reference_model
from trace_train.model import load_policy
from trace_train.paths import REPO_ROOT

TINY = dict(steps=6, batch_size=2, tokenizer_episodes=40, probe_episodes=4, checkpoint_every=3, warmup_steps=2,
            lr=3e-3, max_len=1024)


def _weights(model_dir):
    model, _ = load_policy(model_dir)
    return model.state_dict()


def test_a_spent_budget_pauses_and_each_continuation_ends_at_the_weights_of_an_uninterrupted_run(tmp_path):
    clean = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path / "clean")
    clean.run(progress=False)
    budgeted = BootstrapConfig(**TINY, time_budget_min=0.0)  # spent after every step
    assert budgeted.content_hash() == BootstrapConfig(**TINY).content_hash()
    runner = bc.Bootstrapper(budgeted, tmp_path / "paused")
    for expected_step in range(1, 6):  # the budget is per invocation: each run trains one more step
        with pytest.raises(bc.BootstrapPaused, match=f"paused at step {expected_step} of 6") as paused:
            runner.run(progress=False)
        assert paused.value.step == expected_step and not runner.is_done()
        assert torch.load(runner.dir / "checkpoint.pt", weights_only=False)["step"] == expected_step
    summary = runner.run(progress=False)  # the last step finishes the stage: no pause after it
    assert runner.is_done() and "stopped_early" not in summary
    a, b = _weights(clean.model_dir), _weights(runner.model_dir)
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_compare_models_finds_identity_a_changed_tensor_and_a_changed_tokenizer(tmp_path):
    runner = bc.Bootstrapper(BootstrapConfig(**{**TINY, "steps": 1}), tmp_path / "cache")
    runner.run(progress=False)
    copy = tmp_path / "copy"
    shutil.copytree(runner.model_dir, copy)
    same = compare_models(runner.model_dir, copy)
    assert same.identical and same.max_abs_diff == 0.0 and same.tensors > 5
    assert "identical" in same.summary()
    fingerprint = model_fingerprint(runner.model_dir)
    assert model_fingerprint(copy) == fingerprint and len(fingerprint) == 64

    weights = load_file(copy / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] += 0.25
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    changed = compare_models(runner.model_dir, copy)
    assert not changed.identical and changed.differing == (name,)
    assert changed.max_abs_diff == pytest.approx(0.25, abs=1e-3) and changed.reshaped == ()
    seen = {fingerprint, model_fingerprint(copy)}
    assert len(seen) == 2  # one changed value changes the fingerprint

    weights[name] = weights[name].double()  # same values, another dtype: reported as such, not as a |diff|
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    retyped = compare_models(runner.model_dir, copy)
    assert retyped.reshaped == (name,) and retyped.max_abs_diff == 0.0
    assert "1 of" in retyped.summary() and "(1 in shape or dtype)" in retyped.summary()
    seen.add(model_fingerprint(copy))
    assert len(seen) == 3  # the same values in another dtype are another model

    tokenizer = json.loads((copy / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["zz-new-token"] = 10**6
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert not compare_models(runner.model_dir, copy).tokenizer_identical
    seen.add(model_fingerprint(copy))
    assert len(seen) == 4  # so is another tokenizer
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        compare_models(runner.model_dir, tmp_path)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        model_fingerprint(tmp_path)


def test_compare_to_shipped_applies_only_to_the_shipped_config(tmp_path):
    shipped = REPO_ROOT / "checkpoints" / "retail-sim-tiny"
    shipped_hash = json.loads((shipped / "bootstrap.json").read_text())["config_hash"]
    assert reference_model("shipped", shipped_hash) == shipped
    assert reference_model("shipped", "0" * 16) is None  # another config: nothing to compare with
    assert reference_model(None, shipped_hash) is None
    assert reference_model(str(shipped), "0" * 16) == shipped  # an explicit directory, whatever the hash
    assert reference_model("ab" * 32, shipped_hash) is None  # a recorded fingerprint: no directory to compare
    with pytest.raises(FileNotFoundError, match="compare_to="):
        reference_model(str(tmp_path), shipped_hash)


def _bootstrap_cli(tmp_path, capsys, *overrides):
    """``trace-rl bootstrap`` of the TINY config (one stage, one thread); returns (exit code, stdout, stderr)."""
    tiny = [f"bootstrap.{k}={v}" for k, v in TINY.items()] + ["bootstrap.init_from=null", "bootstrap.threads=1"]
    return run_cli("bootstrap", f"cache_dir={tmp_path / 'cache'}", *tiny, *overrides, hydra_dir=tmp_path / "run",
                   capsys=capsys)


def test_the_cli_pauses_with_its_own_exit_code_and_refuses_an_existing_export(tmp_path, capsys):
    code, _, err = _bootstrap_cli(tmp_path, capsys, "bootstrap.time_budget_min=0")
    assert code == PAUSED_EXIT_CODE, err
    assert "paused at step 1 of 6" in err and "run the same command again" in err
    export = tmp_path / "export"
    export.mkdir()
    (export / "keep.txt").write_text("mine")
    code, _, err = _bootstrap_cli(tmp_path, capsys, f"export_to={export}")
    assert code == 2 and "if_exists=overwrite" in err
    assert (export / "keep.txt").read_text() == "mine"  # nothing was touched
    code, _, err = _bootstrap_cli(tmp_path, capsys, f"compare_to={tmp_path / 'nowhere'}")
    assert code == 2 and "compare_to=" in err
    (checkpoint,) = (tmp_path / "cache").glob("*/checkpoint.pt")
    assert torch.load(checkpoint, weights_only=False)["step"] == 1  # refused before any training
    shipped = REPO_ROOT / "checkpoints" / "retail-sim-tiny"
    code, _, err = _bootstrap_cli(tmp_path, capsys, f"export_to={export}", "if_exists=overwrite")
    assert code == 2 and "not an exported model directory" in err  # overwrite replaces only an exported model
    assert (export / "keep.txt").read_text() == "mine"
    for name in ("bootstrap.json", "config.json"):  # now it is one (an earlier export)
        (export / name).write_text("{}")
    code, _, err = _bootstrap_cli(tmp_path, capsys, f"export_to={export}", "if_exists=overwrite",
                                  f"compare_to={shipped}")
    assert code == 0, err
    assert not (export / "keep.txt").exists() and (export / "model.safetensors").is_file()
    assert json.loads((export / "bootstrap.json").read_text())["config"]["steps"] == 6
    # a 6-step model is not the shipped base, and the CLI says so (on one line: the test sees the text unwrapped)
    assert "24 of 24 tensors differ (max |diff|" in " ".join(err.split())
    recorded = json.loads((export / "bootstrap.json").read_text())["model_fingerprint"]
    assert f"model fingerprint {recorded}" in err and recorded == model_fingerprint(export)
    # a recorded fingerprint is a reference too: the cached model matches its own and not another
    code, _, err = _bootstrap_cli(tmp_path, capsys, f"compare_to={recorded}")
    assert code == 0 and f"the recorded fingerprint {recorded}: bit for bit identical" in " ".join(err.split())
    other = ("0" if recorded[0] != "0" else "1") + recorded[1:]
    code, _, err = _bootstrap_cli(tmp_path, capsys, f"compare_to={other}")
    assert code == 0 and f"the recorded fingerprint {other}: different" in " ".join(err.split())
    # a damaged cache file is a one-line error naming it, not a traceback
    (summary,) = (tmp_path / "cache").glob("*/bootstrap.json")
    summary.write_text('{"config": ')
    code, _, err = _bootstrap_cli(tmp_path, capsys)
    assert code == 2 and str(summary) in err and "Traceback" not in err


def test_a_pipeline_whose_bootstrap_pauses_exits_with_the_pause_code(tmp_path, capsys):
    tiny = [f"bootstrap.{k}={v}" for k, v in TINY.items()] + ["bootstrap.init_from=null", "bootstrap.threads=1"]
    code, _, err = run_cli("pipeline", f"pipeline.run_dir={tmp_path / 'run'}", "pipeline.shipped_checkpoint=null",
                           "bootstrap.time_budget_min=0", *tiny, hydra_dir=tmp_path / "hydra", capsys=capsys)
    assert code == PAUSED_EXIT_CODE, err
    assert "trace-rl pipeline:" in err and "paused at step 1 of 6" in err
