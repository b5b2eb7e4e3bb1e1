"""``trace-rl bench``: paired statistics, and the command on scripted policies, a run dir's envs and a model."""

import json
import math

import pytest
import torch

from tests.cli_runner import run_cli
from trace_train.bench.stats import mcnemar_exact, paired_bootstrap
from trace_train.trajectory import TrajectoryRecord

torch.set_num_threads(1)


def test_mcnemar_exact_matches_the_binomial_tail():
    base = [True] * 10 + [False] * 10
    other = [True] * 2 + [False] * 8 + [True] * 9 + [False] * 1  # b=8, c=9
    b, c, p = mcnemar_exact(base, other)
    assert (b, c) == (8, 9)
    assert p == pytest.approx(min(1.0, 2 * sum(math.comb(17, i) for i in range(9)) / 2 ** 17))
    assert mcnemar_exact([False] * 6, [True] * 6)[2] == pytest.approx(2 / 64)
    assert mcnemar_exact([True, False], [True, False])[2] == 1.0
    with pytest.raises(ValueError, match="length"):
        mcnemar_exact([True], [True, False])


def test_mcnemar_reads_one_trial_per_seed_when_trials_repeat():
    from trace_train.bench.run import compare

    def recs(policy, outcomes):
        return [TrajectoryRecord(env_id="e", seed=seed, messages=[], reward=float(ok), success=ok,
                                 termination="user_stop", policy=policy, info={})
                for seed, trials in enumerate(outcomes) for ok in trials]
    # 12 seeds x 3 trials; the other policy wins every trial of the 4 seeds it wins: 12 discordant
    # episodes but only 4 independent discordant pairs
    base = recs("base", [[False] * 3] * 12)
    other = recs("o", [[True] * 3] * 4 + [[False] * 3] * 8)
    row = compare("e", {"base": base, "o": other}, "base")[1]
    assert (row.mcnemar_b, row.mcnemar_c) == (0, 4)
    assert row.mcnemar_p == pytest.approx(mcnemar_exact([False] * 4, [True] * 4)[2])


def test_paired_bootstrap_interval_is_seeded_and_covers_the_mean():
    base, other = [0, 0, 1, 0, 1, 0, 0, 1], [1, 0, 1, 1, 1, 0, 1, 1]
    first = paired_bootstrap(base, other, n_boot=500, seed=3)
    assert first == paired_bootstrap(base, other, n_boot=500, seed=3)
    mean, low, high = first
    assert mean == pytest.approx(3 / 8) and low <= mean <= high and low >= 0
    assert paired_bootstrap([1, 1], [1, 1]) == (0.0, 0.0, 0.0)


def test_bench_scripted_policies_on_target_and_run_dir_envs(tmp_path, capsys):
    run = tmp_path / "run" / "synthesis"
    run.mkdir(parents=True)
    (run / "prec_bench.py").write_text(
        "from trace_envs.registry import register_env\n"
        "ENV_ID = register_env('precondition_verification-benchtest', "
        "'trace_envs.families.precondition:PreconditionVerificationEnv')\n")
    (run / "manifest.json").write_text(json.dumps(
        {"envs": [{"env_id": "trace/precondition_verification-benchtest-v0", "module": "prec_bench.py"}]}))
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        "bench", "envs=[trace/retail-sim-v0]", f"run_dir={tmp_path / 'run'}", "episodes=8", "trials=2",
        "~policies.base", "+policies.oracle={kind: oracle}",
        "+policies.sloppy={kind: expert, knobs: {precondition: 1.0, multi_step: 1.0}}",
        f"out_dir={out}", hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, err
    doc = json.loads((out / "bench.json").read_text())
    assert doc["envs"] == ["trace/retail-sim-v0", "trace/precondition_verification-benchtest-v0"]
    rows = {(r["env"], r["policy"]): r for r in doc["rows"]}
    assert len(rows) == 4 and doc["baseline"] == "oracle"
    oracle, sloppy = rows[("trace/retail-sim-v0", "oracle")], rows[("trace/retail-sim-v0", "sloppy")]
    assert oracle["n"] == 16 and oracle["delta"] is None and set(oracle["pass_k"]) == {"1", "2"}
    assert sloppy["delta"] < 0 and sloppy["mcnemar_b"] > sloppy["mcnemar_c"]
    assert sloppy["delta"] == pytest.approx(sloppy["success"] - oracle["success"])
    assert oracle["per_capability"]  # per-capability rows from the task annotation
    html = (out / "bench.html").read_text()
    assert "McNemar" in html and "precondition_verification-benchtest" in html and "<svg" in html
    assert "Δ [95% CI]" in stdout or "Δ" in stdout


def test_bench_validates_before_loading_any_model(tmp_path, capsys):
    code, _, err = run_cli("bench", "envs=[trace/no-such-v0]", "policies.base.model=/no/such/model",
                           hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 2 and "unknown env id 'trace/no-such-v0'" in err
    code, _, err = run_cli("bench", "episodes=0", hydra_dir=tmp_path / "h2", capsys=capsys)
    assert code == 2 and "episodes must be >= 1" in err
    code, _, err = run_cli("bench", "baseline=nobody", hydra_dir=tmp_path / "h3", capsys=capsys)
    assert code == 2 and "baseline=nobody is not one of the policies" in err


def test_bench_base_vs_adapter_model(tmp_path, capsys):
    """A model policy and the same model with a (fresh) PEFT adapter, on the calculator env."""
    from peft import LoraConfig, get_peft_model

    from trace_train.model import load_policy

    model, _ = load_policy("checkpoints/retail-sim-tiny")
    peft = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft.save_pretrained(tmp_path / "adapter")
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        "bench", "envs=[trace_envs.examples.calculator:my/calc-v0]", "episodes=3",
        f"+policies.lora={{kind: hf, model: checkpoints/retail-sim-tiny, adapter: {tmp_path / 'adapter'}, "
        "max_new_tokens: 16}", "+policies.base.max_new_tokens=16", f"out_dir={out}",
        hydra_dir=tmp_path / "h", capsys=capsys)
    assert code == 0, err
    rows = json.loads((out / "bench.json").read_text())["rows"]
    assert [r["policy"] for r in rows] == ["base", "lora"] and rows[1]["mcnemar_p"] is not None
    assert (out / "trajectories_trace_envs.examples.calculator_my_calc-v0_lora.jsonl").is_file()
