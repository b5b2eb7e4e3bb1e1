"""A damaged file in a bootstrap cache directory gives a one-line ValueError naming the file and the way out."""

import shutil

import pytest

from trace_train.bootstrap import trainer as bc
from trace_train.bootstrap.config import BootstrapConfig

TINY = dict(steps=2, batch_size=2, tokenizer_episodes=40, probe_episodes=2, checkpoint_every=2, warmup_steps=1,
            lr=3e-3, max_len=1024)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    runner = bc.Bootstrapper(BootstrapConfig(**TINY), tmp_path_factory.mktemp("finished"))
    runner.run(progress=False)
    return runner


def _copy(finished, tmp_path):
    shutil.copytree(finished.dir, tmp_path / finished.dir.name)
    return bc.Bootstrapper(finished.cfg, tmp_path)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("name,damage,rebuild", [
    ("bootstrap.json", lambda p: p.write_text('{"config": '), False),
    ("bootstrap.json", lambda p: p.write_text("[1, 2]"), False),
    ("checkpoint.pt", _truncate, True),
    ("checkpoint.pt", lambda p: p.write_bytes(b""), True),
    ("checkpoint.pt", lambda p: p.write_bytes(b"not a checkpoint"), True),
    ("tokenizer/tokenizer.json", lambda p: p.write_text("{"), True),
    ("tokenizer/tokenizer.json", _truncate, True),
])
def test_a_damaged_cache_file_is_named_in_a_one_line_value_error(finished, tmp_path, name, damage, rebuild):
    runner = _copy(finished, tmp_path)
    damage(runner.dir / name)
    if rebuild:  # a stage still to finish (no bootstrap.json) reads its tokenizer and checkpoint
        (runner.dir / "bootstrap.json").unlink()
    with pytest.raises(ValueError) as info:
        runner.run(progress=False)
    message = str(info.value)
    assert f"bootstrap cache file {runner.dir / name} is damaged" in message, message
    assert "\n" not in message and "delete" in message and str(runner.dir) in message


def test_deleting_a_damaged_summary_rebuilds_it_from_the_checkpoint(finished, tmp_path):
    runner = _copy(finished, tmp_path)
    (runner.dir / "bootstrap.json").write_text('{"config": ')
    with pytest.raises(ValueError, match="delete it to rebuild it"):
        runner.run(progress=False)
    (runner.dir / "bootstrap.json").unlink()
    summary = runner.run(progress=False)
    expected = finished.run(progress=False)
    assert summary["model_fingerprint"] == expected["model_fingerprint"]
    assert summary["final_loss_ema"] == expected["final_loss_ema"]
