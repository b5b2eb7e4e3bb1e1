"""The replication rows end to end on a tiny budget: extra run seeds, the ablation variants and the curves are
stages of the one run directory, their tables land in the report, a rerun skips them, a lost stage is redone."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trace_train.paths import shipped_checkpoint
from trace_train.pipeline.config import PipelineConfig
from trace_train.pipeline.replication import load_tables

REPLICATION = [
    "pipeline.baselines=[grpo_target,grpo_target_4x,mixture,sft,prompted]",
    "pipeline.replication.extra_seeds=[1]", "pipeline.replication.top_k=[2]", "pipeline.replication.scale=[1,2]",
    "pipeline.replication.trace_curve=true", "pipeline.replication.task_router=true",
    "pipeline.replication.gate_grpo=[target]", "pipeline.replication.episode_router=true",
    "pipeline.report.routing_sample=0",
    # 8 episodes per adapter: the shipped base succeeds on some, so every composition has gate data
    "grpo.groups_per_iter=2", "grpo.group_size=4",
    "moe.grpo.iterations=1", "moe.grpo.groups_per_iter=2", "moe.grpo.group_size=2", "moe.grpo.max_new_tokens=24",
    "moe.grpo.progress=false",
    # the episode router row plays 4 target seeds per slot; with 24-token turns no slot solves one, so every seed
    # is kept one-hot on its best slot (the quick preset's `solvers` would leave none)
    "moe.routing.seeds=4", "moe.routing.label=best",
]
CAPS = ("precondition_verification", "multi_step_task_completion")
EXPECTED_STAGES = [f"train/{c}@s1" for c in CAPS] + [
    "compose@s1", "baselines/grpo_target@s1", "baselines/grpo_target_4x", "baselines/grpo_target_4x@s1",
    "baselines/mixture@s1", "baselines/sft@s1", "replication/compose/top2", "replication/compose/top2@s1",
    "replication/compose/first1", "replication/compose/first1@s1", "replication/compose/at0001",
    "replication/eval/TRACE (composed)@s1", "replication/eval/top-2@s1",
    "replication/eval/prompted, 1 descriptions", "replication/eval/task-level router",
    "replication/eval/task-level router@s1", "replication/compose/gates_grpo_target",
    "replication/compose/gates_grpo_target@s1", "replication/eval/TRACE (gates refined by GRPO on the target)@s1",
    "replication/compose/episode_router", "replication/compose/episode_router@s1",
    "replication/eval/TRACE (episode router)@s1", "replication/tables"]


def test_replication_config_is_strict():
    with pytest.raises(ValueError, match="gate_grpo"):
        PipelineConfig.from_dict({"replication": {"gate_grpo": ["nowhere"]}})
    with pytest.raises(ValueError, match="distinct"):
        PipelineConfig.from_dict({"replication": {"extra_seeds": [1, 1]}})
    with pytest.raises(ValueError, match="top_k"):
        PipelineConfig.from_dict({"replication": {"top_k": [0]}})
    with pytest.raises(ValueError, match="replication.nope"):
        PipelineConfig.from_dict({"replication": {"nope": 1}})
    assert not PipelineConfig.from_dict({}).replication.enabled
    assert PipelineConfig.from_dict({"replication": {"scale": [1]}}).replication.enabled


def test_extra_seed_equal_to_the_own_seed_fails(tiny_policy, run_pipeline, tmp_path):
    out = run_pipeline(tmp_path / "run", tiny_policy, "pipeline.replication.extra_seeds=[0]")
    assert out.returncode != 0
    assert "repeats the pipeline's own run seed grpo.seed=0" in out.stderr


@pytest.mark.slow
def test_replication_rows_are_resumable_stages(run_pipeline, load_benchmark, tmp_path):
    # the shipped base: its capability-env rollouts succeed, so the gates (and every composed row) have data
    base = shipped_checkpoint("retail-sim-tiny")
    run_dir = tmp_path / "run"
    out = run_pipeline(run_dir, base, *REPLICATION)
    assert out.returncode == 0, out.stderr[-3000:]
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    caps = CAPS
    for name in EXPECTED_STAGES:
        assert stages.get(name, {}).get("status") == "done", (name, sorted(stages))
    # the 4x baseline trains four times TRACE's budget (2 adapters x 1 iteration x 2 groups x 4); the 1x row is
    # its checkpoint at TRACE's budget
    assert stages["baselines/grpo_target_4x"]["outputs"]["rollouts"] == 64
    assert stages["baselines/grpo_target"]["outputs"]["rollouts"] == 16
    assert stages["baselines/grpo_target"]["outputs"]["adapter_dir"].endswith("grpo_target_4x/v0002")
    assert stages["replication/compose/gates_grpo_target"]["outputs"]["gate_grpo"]["rollouts"] == 4
    # another run seed trains other episodes: its GRPO seeds differ from the own run's
    own = (run_dir / "train" / caps[0] / "seeds.jsonl").read_text()
    other = (run_dir / f"train/{caps[0]}@s1" / "seeds.jsonl").read_text()
    assert own != other

    tables = load_tables(run_dir)
    assert tables["seeds"] == [0, 1]
    main = tables["main"]
    for name in ("TRACE (composed)", "grpo_target", "grpo_target_4x", "mixture", "sft", "task-level router",
                 "TRACE (gates refined by GRPO on the target)", "TRACE (episode router)", *caps):
        assert main[name]["n_seeds"] == 2, name
    assert main["base"]["n_seeds"] == 1 and main["prompted"]["n_seeds"] == 1
    assert main["TRACE (composed)"]["rollouts"] == 16 and main["grpo_target_4x"]["rollouts"] == 64
    assert list(tables["routing"]) == ["top-1", "top-2"] and tables["routing"]["top-2"]["n_seeds"] == 2
    assert [row["k"] for row in tables["scale"]] == [1, 2]
    assert tables["scale"][0]["trace"]["n_seeds"] == 2 and tables["scale"][0]["prompted"]["n_seeds"] == 1
    assert [p["rollouts"] for p in tables["efficiency"]["TRACE"]] == [16]
    assert [p["rollouts"] for p in tables["efficiency"]["grpo_target_4x"]] == list(range(8, 65, 8))
    assert "grpo_target" not in tables["efficiency"]  # its points are the 4x run's first two
    assert len(tables["goals"]) == 8 and all(g["met"] in (True, False) for g in tables["goals"])
    assert tables["goals"][4]["goal"].startswith("TRACE (episode router): ")
    # the episode router is fitted to the target's routing targets (every slot, the base too, plays the 4 routing
    # seeds: its rollouts are reported) and routes each held-out episode once
    routing = stages["replication/compose/episode_router"]["outputs"]
    assert routing["gate_rollouts"] == 4 * (1 + len(caps))
    assert main["TRACE (episode router)"]["rollouts"] == 16 + 4 * (1 + len(caps))
    episode_routed = run_dir / "replication/eval/TRACE (episode router)/trajectories_TRACE (episode router).jsonl"
    assert all(json.loads(line)["info"]["route"]["label"] in ("base", *caps)
               for line in episode_routed.read_text().splitlines())
    # the task-level router routes each episode once, from the analysis' descriptions of the adapters
    routed = run_dir / "replication/eval/task-level router/trajectories_task-level router.jsonl"
    routes = [json.loads(line)["info"]["route"] for line in routed.read_text().splitlines()]
    assert all(r["label"] in ("base", *caps) for r in routes)
    # ... retrieving over the requests its adapters' GRPO runs solved (one corpus per run seed)
    corpus = stages["replication/route_corpus"]["outputs"]
    assert set(corpus["requests"]) <= set(caps) and sum(corpus["requests"].values()) > 0
    assert stages["replication/route_corpus@s1"]["status"] == "done"
    assert all(r["similarities"] and set(r["similarities"]) <= set(caps) for r in routes)
    # the prompted row with one description carries only the first capability's description
    prompted = run_dir / "replication/eval/prompted, 1 descriptions/trajectories_prompted, 1 descriptions.jsonl"
    system = json.loads(prompted.read_text().splitlines()[0])["messages"][0]["content"]
    assert caps[0].replace("_", " ") in system and caps[1].replace("_", " ") not in system
    html = (run_dir / "report.html").read_text()
    assert "Miniature replication" in html and "Routing ablation" in html and "Capabilities scale" in html
    assert '<p class="headline">' in html and "&lt;span" not in html  # badges are markup, not escaped text
    assert main["precondition_verification"]["rollouts"] == 8  # 1 iteration x 2 groups x 4

    printed = subprocess.run([sys.executable, "benchmarks/miniature_replication.py", "--preset", "replication",
                              "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=300,
                             cwd=Path(__file__).resolve().parents[2])
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "routing ablation" in printed.stdout and "goal, TRACE >= base + 0.15" in printed.stdout
    stages_now = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    minutes = load_benchmark("miniature_replication").run_minutes(stages_now)
    assert minutes <= sum(s["wall_s"] for s in stages_now.values()) / 60 + 0.05
    assert f"goal, run time <= 180 min on 2 cores: {minutes:.1f} min" in printed.stdout
    # this run has one extra seed and one routing row where the preset has two: its time is no verdict
    assert ("-> not measured (the run lacks the preset's run seeds [2]; routing rows ['top-4'])"
            in printed.stdout), printed.stdout[-1500:]

    # A rerun skips every stage; a lost eval stage (killed mid-way) is redone alone: it plays the same episodes,
    # so the tables (whose hash holds every row's result) and the report stay as they are.
    state = json.loads((run_dir / "pipeline.json").read_text())
    state["stages"]["replication/eval/top-2@s1"]["status"] = "interrupted"
    (run_dir / "pipeline.json").write_text(json.dumps(state))
    again = run_pipeline(run_dir, base, *REPLICATION)
    assert again.returncode == 0, again.stderr[-3000:]
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    ran = sorted(n for n, s in stages.items() if s["last_action"] == "ran")
    assert ran == ["replication/eval/top-2@s1"], ran


def test_replication_in_two_workers_runs_the_same_stages_at_once(run_pipeline, load_benchmark, tmp_path):
    """pipeline.workers=2: every stage of the run, several at once in one-thread workers; no stage hash sees the
    setting, so the same run in one process afterwards skips them all."""
    base = shipped_checkpoint("retail-sim-tiny")
    run_dir = tmp_path / "run"
    out = run_pipeline(run_dir, base, *REPLICATION, "pipeline.workers=2")
    assert out.returncode == 0, out.stderr[-3000:]
    stages = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    for name in EXPECTED_STAGES + ["eval", "report", f"train/{CAPS[0]}", "baselines/grpo_target_4x"]:
        assert stages.get(name, {}).get("status") == "done", (name, sorted(stages))
    # stages ran at once: the 4x baseline of each seed beside other training, the ablations' evaluations beside
    # one another
    spans = {name: s["spans"][-1] for name, s in stages.items()}

    def overlapping(prefix):
        named = sorted((start, end, name) for name, (start, end) in spans.items() if name.startswith(prefix))
        return [(a, b) for (_, end_a, a), (start_b, _, b) in zip(named, named[1:]) if start_b < end_a]

    assert overlapping("train/") or overlapping("baselines/"), sorted(spans.items(), key=lambda kv: kv[1])
    assert overlapping("replication/"), sorted(spans.items(), key=lambda kv: kv[1])
    minutes = load_benchmark("miniature_replication").run_minutes(stages)
    assert minutes < sum(s["wall_s"] for s in stages.values()) / 60  # elapsed, not the sum of the stages' times
    tables = load_tables(run_dir)
    assert tables["seeds"] == [0, 1]
    assert all(tables["main"][name]["n_seeds"] == 2 for name in ("TRACE (composed)", "grpo_target_4x", "sft", *CAPS))
    assert list(tables["routing"]) == ["top-1", "top-2"] and [row["k"] for row in tables["scale"]] == [1, 2]
    assert [p["rollouts"] for p in tables["efficiency"]["grpo_target_4x"]] == list(range(8, 65, 8))

    again = run_pipeline(run_dir, base, *REPLICATION, "pipeline.workers=1")
    assert again.returncode == 0, again.stderr[-3000:]
    state = json.loads((run_dir / "pipeline.json").read_text())["stages"]
    assert {name: s.get("last_action") for name, s in state.items() if s.get("last_action") != "skipped"} == {}
