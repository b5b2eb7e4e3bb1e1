"""The sample-efficiency curve with ``eval.curve_episodes: 0``: GRPO on the target's final point taken from its
held-out evaluation without playing an episode (the replayed checkpoints: tests/pipeline/test_pipeline.py)."""

import json
import subprocess
import sys

from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.stages import sample_efficiency

TRACE = {"overall": {"rate": 0.23, "low": 0.19, "high": 0.27, "successes": 115, "n": 500}}
GRPO_FINAL = {"overall": {"rate": 0.252, "low": 0.216, "high": 0.292, "successes": 126, "n": 500}}


def _target(tmp_path):
    # checkpoint dirs that do not exist: any attempt to play them fails loudly
    return {"grpo_target": {"versions": [{"iteration": 4, "rollouts": 320, "dir": str(tmp_path / "missing4")},
                                         {"iteration": 36, "rollouts": 2880, "dir": str(tmp_path / "missing36")}]}}


def test_zero_curve_episodes_takes_the_final_point_from_the_evaluation(tmp_path):
    cfg = PipelineConfig.from_dict({"eval": {"curve_episodes": 0, "episodes": 500}})
    doc = sample_efficiency(cfg, str(tmp_path / "no-model"), 2880, TRACE, _target(tmp_path), tmp_path,
                            {"grpo_target": GRPO_FINAL, "TRACE (composed)": TRACE})
    assert doc["curves"]["TRACE"] == [[2880.0, 0.23, 0.19, 0.27]]
    assert doc["curves"]["GRPO on target"] == [[2880.0, 0.252, 0.216, 0.292]]
    assert json.loads((tmp_path / "sample_efficiency.json").read_text()) == doc


def test_zero_curve_episodes_without_an_evaluated_target_row_draws_trace_alone(tmp_path):
    cfg = PipelineConfig.from_dict({"eval": {"curve_episodes": 0}})
    doc = sample_efficiency(cfg, str(tmp_path / "no-model"), 2880, TRACE, _target(tmp_path), tmp_path, {})
    assert list(doc["curves"]) == ["TRACE"]


def test_negative_curve_episodes_is_refused(tmp_path):
    out = subprocess.run([sys.executable, "-m", "trace_train.cli", "pipeline", f"pipeline.run_dir={tmp_path}",
                          "pipeline.eval.curve_episodes=-1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "pipeline.eval.curve_episodes must be >= 0" in out.stdout + out.stderr
    assert not (tmp_path / "pipeline.json").exists()
