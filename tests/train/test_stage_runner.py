import json

import pytest

from trace_train.pipeline.stage_runner import StageRunner, content_hash


def test_skip_rerun_force_and_resume(tmp_path):
    calls = []

    def stage(out_dir):
        calls.append(out_dir.name)
        (out_dir / "x.txt").write_text("done")
        return {"n": len(calls)}

    runner = StageRunner(tmp_path)
    h = content_hash({"lr": 1})
    assert runner.run("train", h, stage) == {"n": 1}
    assert StageRunner(tmp_path).run("train", h, stage) == {"n": 1} and len(calls) == 1  # cached
    assert StageRunner(tmp_path).run("train", content_hash({"lr": 2}), stage) == {"n": 2}  # inputs changed
    assert StageRunner(tmp_path, force={"train"}).run("train", content_hash({"lr": 2}), stage) == {"n": 3}
    state = json.loads((tmp_path / "pipeline.json").read_text())
    assert state["stages"]["train"]["status"] == "done"


def test_changed_or_forced_stage_never_resumes_what_other_inputs_left(tmp_path):
    def train(out_dir):
        checkpoint = out_dir / "checkpoint"
        resumed = checkpoint.exists()
        checkpoint.write_text("iteration 15")
        return {"resumed": resumed}

    assert StageRunner(tmp_path).run("train/a", "h1", train) == {"resumed": False}
    assert StageRunner(tmp_path).run("train/a", "h2", train) == {"resumed": False}  # inputs changed
    assert StageRunner(tmp_path, force={"train/a"}).run("train/a", "h2", train) == {"resumed": False}
    assert (tmp_path / "train" / "a" / "checkpoint").exists()


def test_interrupted_stage_is_recorded_and_resumed(tmp_path):
    attempts = {"n": 0}

    def flaky(out_dir):
        attempts["n"] += 1
        progress = out_dir / "progress"
        done = int(progress.read_text()) if progress.exists() else 0
        progress.write_text(str(done + 1))
        if attempts["n"] == 1:
            raise KeyboardInterrupt
        return {"iterations": done + 1}

    runner = StageRunner(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        runner.run("train", "h", flaky)
    assert json.loads((tmp_path / "pipeline.json").read_text())["stages"]["train"]["status"] == "interrupted"
    assert StageRunner(tmp_path).run("train", "h", flaky) == {"iterations": 2}  # resumed from its own progress


def test_content_hash_ignores_key_order():
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})
